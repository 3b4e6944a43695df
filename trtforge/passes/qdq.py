"""``apply_plan``: the frozen ``QuantPlan`` (``trtforge.core.quant_plan``) written into an ONNX graph as Q/DQ.

The plan is policy-free data: ``trtforge.quantize`` computes it (calibration, placement,
sensitivity); this module only writes it into a graph, so ``passes.process`` can apply a frozen
plan without importing the quantizer.

Activations get QuantizeLinear → DequantizeLinear (per tensor, symmetric, zero point 0);
weights become quantized initializers behind a DequantizeLinear (per output channel, or in blocks
along the reduction axis). The quantized dtype is each input's own (``QUANT_DTYPES``): INT8,
FLOAT8E4M3FN (FP8; opset 19) or INT4 (opset 21); a weight-only layer has a weight input and no
activation input. Graph I/O and every layer outside the plan keep their float type.

Layers are addressed by their first output tensor's name, which the FP16 pass keeps, so the same
plan applies to the FP32 graph (ONNX Runtime simulation, FP32 scales) and to the FP16 graph
handed to TensorRT (FP16 scales). The scale dtype is the dtype of the tensor a scale quantizes
(opset ≥ 19 allows FP16 scales). Scales are stored already rounded to FP16, so both graphs
quantize on exactly the same grid.

Example:
    >>> plan.layers[0]
    QuantLayer(output='getitem_3', op_type='Conv', label='_blocks.0._depthwise_conv', ...)
    >>> qdq_fp16 = apply_plan(fp16_model, plan)     # for TensorRT (opset ≥ 19), FP16 scales
    >>> qdq_fp32 = apply_plan(fp32_model, plan)     # for ONNX Runtime accuracy checks, FP32 scales
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir

from trtforge.core.errors import InvalidArgument
from trtforge.core.quant_plan import (  # the plan is defined in core (shared with quantize and convert)
    BLOCKED_OPSET,
    MIN_SCALE,
    QDQ_OPSET,
    QUANT_DTYPES,
    QuantDtype,
    QuantInput,
    QuantLayer,
    QuantPlan,
    fp16_scales,
)
from trtforge.passes.graph import (
    constant_value,
    copy_model,
    ensure_opset,
    nodes_by_output,
    to_proto,
)

__all__ = ["BLOCKED_OPSET", "MIN_SCALE", "QDQ_OPSET", "QUANT_DTYPES", "PlanMismatchError", "QuantDtype", "QuantInput",
           "QuantLayer", "QuantPlan", "apply_plan", "apply_plan_in_place", "broadcast_scales", "dequantized_weight",
           "fp16_scales", "quantize_values", "quantize_weight"]


class PlanMismatchError(InvalidArgument):
    """The plan names a layer or weight that the graph does not have."""


def broadcast_scales(q: QuantInput, ndim: int) -> np.ndarray:
    """``q``'s scales shaped to broadcast against a weight of rank ``ndim`` (blocks repeated)."""
    scales = q.scale_array()
    if q.block_size:
        return np.repeat(scales, q.block_size, axis=q.axis)
    if q.axis is not None:
        shape = [1] * ndim
        shape[q.axis] = -1
        return scales.reshape(shape)
    return scales


def quantize_values(x: np.ndarray, scales: np.ndarray, qtype: QuantDtype) -> np.ndarray:
    """``x / scales`` on ``qtype``'s grid (symmetric, saturated to ±qmax) in its numpy type."""
    scaled = np.clip(np.asarray(x, dtype=np.float32) / scales, -qtype.qmax, qtype.qmax)
    return (np.round(scaled) if qtype.integer else scaled).astype(qtype.numpy)


def _scales_for(weight: np.ndarray, q: QuantInput) -> np.ndarray:
    scales = broadcast_scales(q, weight.ndim)
    return scales[tuple(slice(0, n) for n in weight.shape)] if q.block_size else scales


def quantize_weight(weight: np.ndarray, q: QuantInput) -> np.ndarray:
    """The quantized values of ``weight`` on the plan's grid (symmetric, saturated to ±qmax of its dtype)."""
    return quantize_values(weight, _scales_for(weight, q), q.qtype)


def dequantized_weight(weight: np.ndarray, q: QuantInput) -> np.ndarray:
    """What the DequantizeLinear of ``weight`` under ``q`` gives back (FP32): its value on the plan's grid."""
    return quantize_weight(weight, q).astype(np.float32) * _scales_for(weight, q)


def _missing_types(model: ir.Model, names: set[str]) -> dict[str, ir.DataType]:
    """dtypes of ``names`` from ONNX shape inference, for values the graph left untyped (best effort)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(to_proto(model), strict_mode=False)
    except Exception:  # shape inference is best effort; unknown types fall back to FP32 scales
        return {}
    return {vi.name: ir.DataType(vi.type.tensor_type.elem_type)
            for vi in [*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output]
            if vi.name in names and vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type}


class _QdqWriter:
    """Adds Q/DQ nodes and INT8 initializers to one graph, sharing them between layers that read alike."""

    def __init__(self, model: ir.Model) -> None:
        self.graph = model.graph
        self.weight_nodes: list[ir.Node] = []
        self.acts: dict[tuple[str, float], ir.Value] = {}
        self.weights: dict[tuple[str, tuple], ir.Value] = {}
        self.serial = 0
        self.types: dict[str, ir.DataType] = {}

    def _initializer(self, array: np.ndarray, name: str) -> ir.Value:
        value = ir.Value(name=name, const_value=ir.tensor(array, name=name))
        self.graph.register_initializer(value)
        return value

    def weight(self, value: ir.Value, q: QuantInput, label: str) -> ir.Value:
        """The DequantizeLinear output that replaces float weight ``value``."""
        key = (value.name, q.scales)
        if key not in self.weights:
            array = constant_value(value)
            if array is None:
                raise PlanMismatchError(f"weight {value.name!r} of {label!r} is not a constant in this graph")
            self.serial += 1
            dtype = np.float16 if array.dtype == np.float16 else np.float32
            base = f"{value.name}__w{self.serial}"
            scales = q.scale_array(dtype)
            inputs = [self._initializer(quantize_weight(array, q), f"{base}_{q.dtype}"),
                      self._initializer(scales, base + "_scale"),
                      self._initializer(np.zeros(scales.shape, dtype=q.qtype.numpy), base + "_zp")]
            attrs = {"axis": q.axis} if q.axis is not None else {}
            if q.block_size:
                attrs["block_size"] = q.block_size
            node = ir.node("DequantizeLinear", inputs, attrs or None,
                           outputs=[ir.Value(name=base + "_dq")], name=base + "_DequantizeLinear")
            self.weight_nodes.append(node)
            self.weights[key] = node.outputs[0]
        return self.weights[key]

    def activation(self, value: ir.Value, scale: float, consumer: ir.Node, qtype: QuantDtype) -> ir.Value:
        """The DequantizeLinear output that replaces activation ``value`` (Q/DQ emitted before ``consumer``)."""
        key = (value.name, scale, qtype.name)
        if key not in self.acts:
            self.serial += 1
            dtype = self.types.get(value.name, value.dtype)
            np_dtype = np.float16 if dtype == ir.DataType.FLOAT16 else np.float32
            base = f"{value.name}__a{self.serial}"
            scale_v = self._initializer(np.asarray(scale, dtype=np_dtype), base + "_scale")
            zp = self._initializer(np.asarray(0, dtype=qtype.numpy), base + "_zp")
            q = ir.node("QuantizeLinear", [value, scale_v, zp], outputs=[ir.Value(name=base + "_q")],
                        name=base + "_QuantizeLinear")
            dq = ir.node("DequantizeLinear", [q.outputs[0], scale_v, zp], outputs=[ir.Value(name=base + "_dq")],
                         name=base + "_DequantizeLinear")
            self.graph.insert_before(consumer, [q, dq])
            self.acts[key] = dq.outputs[0]
        return self.acts[key]

    def finish(self) -> None:
        """Weight DequantizeLinears first; initializers no node reads any more (float weights) dropped."""
        if self.weight_nodes:
            self.graph.insert_before(self.graph[0], self.weight_nodes)
        for name, value in list(self.graph.initializers.items()):
            if not value.uses() and not value.is_graph_output():
                if value.is_graph_input():  # a weight listed as an input too (IR 3 and older): a dead input now
                    self.graph.inputs.remove(value)
                del self.graph.initializers[name]


def _layer_node(by_output: dict[str, ir.Node], layer: QuantLayer) -> ir.Node:
    node = by_output.get(layer.output)
    # The float pass renames a graph output's producer (``y`` → ``y_float16`` + Cast back to ``y``).
    while node is not None and node.op_type != layer.op_type and node.op_type == "Cast":
        node = node.inputs[0].producer() if node.inputs and node.inputs[0] is not None else None
    if node is None or node.op_type != layer.op_type:
        raise PlanMismatchError(
            f"plan layer {layer.label!r} (output {layer.output!r}) is not in this graph; "
            "compute the plan on the same model you apply it to"
        )
    return node


def apply_plan(model: ir.Model, plan: QuantPlan) -> ir.Model:
    """A copy of ``model`` (opset ≥ ``plan.opset``) with the plan's Q/DQ nodes; no other node changes.

    Scales take the dtype of the tensor they quantize: FP16 in an FP16 graph, FP32 in an FP32 one.

    Example:
        >>> has_qdq(apply_plan(model, plan))
        True
    """
    return apply_plan_in_place(ensure_opset(copy_model(model), plan.opset), plan)


def apply_plan_in_place(out: ir.Model, plan: QuantPlan) -> ir.Model:
    """``apply_plan`` on ``out`` itself (already at opset ≥ 19); returns ``out``."""
    by_output = nodes_by_output(out.graph)
    writer = _QdqWriter(out)
    targets = [(layer, _layer_node(by_output, layer)) for layer in plan.layers]
    untyped = {node.inputs[q.index].name for layer, node in targets for q in layer.inputs
               if not q.is_weight and node.inputs[q.index].dtype is None}
    writer.types = _missing_types(out, untyped) if untyped else {}
    for layer, node in targets:
        for q in layer.inputs:
            value = node.inputs[q.index]
            if q.is_weight:
                node.replace_input_with(q.index, writer.weight(value, q, layer.label))
            else:
                node.replace_input_with(q.index, writer.activation(value, q.scales[0], node, q.qtype))
    writer.finish()
    return out
