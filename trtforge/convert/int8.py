"""INT8 on the direct path: the Q/DQ pairs the converters emit for the layers of a ``QuantPlan``.

The plan is the one quantization plan (``trtforge.core.quant_plan``), computed outside ``convert``
(``trtforge.quantize.module_calibration`` calibrates the PyTorch module): each ``QuantLayer`` is addressed
by a module path (``"features.0.conv"``, as ``named_modules`` spells it) and holds the per-tensor
activation scale and the per-output-channel weight scales. A convolution or matrix-product node is
quantized when the innermost module of its ``nn_module_stack`` (torch.export's metadata) is a layer of
the plan: its input goes through quantize → dequantize with the activation scale, its constant weight
through quantize → dequantize with the per-channel scales, and the layer itself stays in the float type
(TensorRT fuses Q/DQ into INT8 kernels, as for the ONNX path's Q/DQ graphs).

Example:
    >>> plan = QuantPlan((QuantLayer("conv", "Conv", "conv", (QuantInput(0, "conv", (0.02,)),
    ...     QuantInput(1, "conv.weight", (0.001, 0.002), axis=0, is_weight=True))),))
    >>> lowered = lower_module(model, (x,), precision="fp16", int8=plan)
    >>> lowered.int8_layers
    {'conv': 'convolution'}
"""

from __future__ import annotations

import torch

from trtforge.convert.network import Tensor
from trtforge.core.errors import InternalError
from trtforge.core.quant_plan import QuantInput, QuantLayer, QuantPlan


def layer_for(plan: QuantPlan, node: torch.fx.Node) -> tuple[str, QuantLayer] | None:
    """The (module path, plan layer) of the innermost module that ``node`` was traced in, if quantized."""
    path = module_path(node)
    layer = None if path is None else plan.layer(path)
    return None if layer is None else (path, layer)


def module_path(node: torch.fx.Node) -> str | None:
    """The innermost module of a node's ``nn_module_stack`` as ``named_modules`` spells it, or None.

    Example:
        >>> module_path(conv_node)
        'features.0'
    """
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return None
    path = list(stack.values())[-1][0]
    return path if isinstance(path, str) else None


def qdq(net, x: Tensor, scale: torch.Tensor, axis: int = 0) -> Tensor:
    """``x`` → quantize → dequantize (back to ``x``'s dtype) with ``scale`` (0-d, or 1-D along ``axis``)."""
    return net.dequantize(net.quantize(x, scale, axis), scale, x.dtype, axis)


def _int8(q: QuantInput | None, layer: QuantLayer, what: str) -> QuantInput:
    """``q`` when the converters can emit it: INT8, per tensor or per channel (no blocks)."""
    if q is None or q.dtype != "int8" or q.block_size:
        raise InternalError(f"the direct path emits INT8 {what} Q/DQ; plan layer {layer.label!r} has "
                            f"{'no ' + what if q is None else q.dtype + (' blocked' if q.block_size else '')} input")
    return q


def activation_qdq(net, x: Tensor, layer: QuantLayer) -> Tensor:
    """A layer input through a per-tensor Q/DQ pair (the plan layer's activation scale)."""
    return qdq(net, x, torch.tensor(_int8(layer.activation, layer, "activation").scales[0], dtype=torch.float32))


def weight_qdq(net, weight: torch.Tensor, layer: QuantLayer, axis: int, dtype: torch.dtype) -> Tensor:
    """A constant weight (in ``dtype``) through a per-channel Q/DQ pair along its output-channel ``axis``."""
    per_channel = torch.tensor(_int8(layer.weight, layer, "weight").scales, dtype=torch.float32)
    if weight.shape[axis] != per_channel.numel():
        raise InternalError(f"{per_channel.numel()} weight scales for a weight of shape {tuple(weight.shape)} "
                            f"along axis {axis}")
    return qdq(net, net.constant(weight.detach().to(dtype)), per_channel, axis)
