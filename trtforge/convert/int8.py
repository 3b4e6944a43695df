"""INT8 on the direct path: the scales a lowering is handed, and the Q/DQ pairs the converters emit.

Scales come from outside ``convert`` (trtforge.pipeline.direct_int8 calibrates the PyTorch module with
``trtforge.quantize``) as a frozen mapping: module path (``"features.0.conv"``, as
``named_modules`` spells it) → ``LayerScales``. A convolution or matrix-product node is quantized when
the innermost module of its ``nn_module_stack`` (torch.export's metadata) is in the mapping: its input
goes through quantize → dequantize with the per-tensor activation scale, its constant weight through
quantize → dequantize with per-output-channel scales, and the layer itself stays in the float type
(TensorRT fuses Q/DQ into INT8 kernels, as for the ONNX path's Q/DQ graphs).

Example:
    >>> scales = Int8Scales.of({"conv": LayerScales(0.02, (0.001, 0.002))})
    >>> lowered = lower_module(model, (x,), precision="fp16", int8=scales)
    >>> lowered.int8_layers
    {'conv': 'convolution'}
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import torch

from trtforge.convert.network import Tensor
from trtforge.core.errors import InternalError


@dataclass(frozen=True)
class LayerScales:
    """One layer's INT8 scales: its input activation (per tensor) and its weight (per output channel)."""

    input_scale: float
    weight_scales: tuple[float, ...]


@dataclass(frozen=True)
class Int8Scales:
    """Module path → ``LayerScales``, read-only; the layers not named stay in the float type."""

    layers: Mapping[str, LayerScales] = field(default_factory=lambda: MappingProxyType({}))

    @classmethod
    def of(cls, layers: Mapping[str, LayerScales]) -> Int8Scales:
        return cls(MappingProxyType(dict(layers)))

    def for_node(self, node: torch.fx.Node) -> tuple[str, LayerScales] | None:
        """The (module path, scales) of the innermost module that ``node`` was traced in, if quantized."""
        path = module_path(node)
        return None if path is None or path not in self.layers else (path, self.layers[path])


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


def activation_qdq(net, x: Tensor, scales: LayerScales) -> Tensor:
    """A layer input through a per-tensor Q/DQ pair."""
    return qdq(net, x, torch.tensor(scales.input_scale, dtype=torch.float32))


def weight_qdq(net, weight: torch.Tensor, scales: LayerScales, axis: int, dtype: torch.dtype) -> Tensor:
    """A constant weight (in ``dtype``) through a per-channel Q/DQ pair along its output-channel ``axis``."""
    per_channel = torch.tensor(scales.weight_scales, dtype=torch.float32)
    if weight.shape[axis] != per_channel.numel():
        raise InternalError(f"{per_channel.numel()} weight scales for a weight of shape {tuple(weight.shape)} "
                            f"along axis {axis}")
    return qdq(net, net.constant(weight.detach().to(dtype)), per_channel, axis)
