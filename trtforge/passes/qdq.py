"""The frozen ``QuantPlan`` (which layers run in INT8, with which scales) and ``apply_plan``, the Q/DQ pass.

The plan is policy-free data: ``trtforge.quantize`` computes it (calibration, placement,
sensitivity); this module only writes it into a graph, so ``passes.process`` can apply a frozen
plan without importing the quantizer.

Activations get QuantizeLinear → DequantizeLinear (per tensor, symmetric, zero point 0);
weights become INT8 initializers behind a DequantizeLinear (per output channel). Graph I/O and
every layer outside the plan keep their float type.

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

from dataclasses import dataclass, replace

import numpy as np
import onnx
import onnx_ir as ir

from trtforge.core.errors import InvalidArgument
from trtforge.passes.graph import (
    QDQ_OPSET,
    constant_value,
    copy_model,
    ensure_opset,
    nodes_by_output,
    to_proto,
)

#: Smallest scale kept (FP16 can represent it, ORT and TensorRT handle it).
MIN_SCALE = 2.0**-20


def fp16_scales(values) -> tuple[float, ...]:
    """Scales clamped to [MIN_SCALE, 65504] and rounded to FP16-representable floats."""
    arr = np.clip(np.asarray(values, dtype=np.float32), MIN_SCALE, 65504.0)
    return tuple(float(v) for v in arr.astype(np.float16).astype(np.float32))


@dataclass(frozen=True)
class QuantInput:
    """One quantized input of a layer: per-tensor (axis None) or per-channel scales."""

    index: int
    tensor: str
    scales: tuple[float, ...]
    axis: int | None = None
    is_weight: bool = False


@dataclass(frozen=True)
class QuantLayer:
    """A Conv/ConvTranspose/MatMul/Gemm layer that runs in INT8."""

    output: str
    op_type: str
    label: str
    inputs: tuple[QuantInput, ...]
    macs: int = 0


@dataclass(frozen=True)
class QuantPlan:
    """Everything the Q/DQ pass needs, and what the report says about it."""

    layers: tuple[QuantLayer, ...]
    excluded: tuple[tuple[str, str], ...] = ()  # (label, reason)
    calibrator: str = "entropy"
    total_macs: int = 0

    @property
    def int8_macs(self) -> int:
        return sum(layer.macs for layer in self.layers)

    @property
    def coverage(self) -> float:
        """Share of Conv/ConvTranspose/MatMul/Gemm multiply-accumulates that run in INT8."""
        return self.int8_macs / self.total_macs if self.total_macs else 0.0

    def only(self, outputs) -> QuantPlan:
        """A plan restricted to the layers whose outputs are in ``outputs`` (sensitivity runs)."""
        keep = set(outputs)
        return replace(self, layers=tuple(layer for layer in self.layers if layer.output in keep))

    def without(self, outputs, reason: str) -> QuantPlan:
        """A plan with the layers whose outputs are in ``outputs`` moved back to FP16."""
        drop = set(outputs)
        moved = tuple((layer.label, reason) for layer in self.layers if layer.output in drop)
        return replace(
            self, layers=tuple(layer for layer in self.layers if layer.output not in drop),
            excluded=self.excluded + moved,
        )

    def to_dict(self) -> dict:
        return {
            "calibrator": self.calibrator,
            "coverage": self.coverage,
            "layers": [
                {"output": layer.output, "op": layer.op_type, "label": layer.label, "macs": layer.macs,
                 "inputs": [{"index": q.index, "tensor": q.tensor, "axis": q.axis, "weight": q.is_weight,
                             "scales": list(q.scales) if q.axis is None or len(q.scales) <= 8 else len(q.scales)}
                            for q in layer.inputs]}
                for layer in self.layers
            ],
            "excluded": [list(e) for e in self.excluded],
        }


class PlanMismatchError(InvalidArgument):
    """The plan names a layer or weight that the graph does not have."""


def quantize_weight(weight: np.ndarray, q: QuantInput) -> np.ndarray:
    """INT8 values of ``weight`` on the plan's grid (symmetric, clipped to ±127)."""
    scales = np.asarray(q.scales, dtype=np.float32)
    if q.axis is not None:
        shape = [1] * weight.ndim
        shape[q.axis] = -1
        scales = scales.reshape(shape)
    else:
        scales = scales.reshape(())
    return np.clip(np.round(weight.astype(np.float32) / scales), -127, 127).astype(np.int8)


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
            shape = (len(q.scales),) if q.axis is not None else ()
            inputs = [self._initializer(quantize_weight(array, q), base + "_int8"),
                      self._initializer(np.asarray(q.scales, dtype=dtype).reshape(shape), base + "_scale"),
                      self._initializer(np.zeros(shape, dtype=np.int8), base + "_zp")]
            node = ir.node("DequantizeLinear", inputs, {"axis": q.axis} if q.axis is not None else None,
                           outputs=[ir.Value(name=base + "_dq")], name=base + "_DequantizeLinear")
            self.weight_nodes.append(node)
            self.weights[key] = node.outputs[0]
        return self.weights[key]

    def activation(self, value: ir.Value, scale: float, consumer: ir.Node) -> ir.Value:
        """The DequantizeLinear output that replaces activation ``value`` (Q/DQ emitted before ``consumer``)."""
        key = (value.name, scale)
        if key not in self.acts:
            self.serial += 1
            dtype = self.types.get(value.name, value.dtype)
            np_dtype = np.float16 if dtype == ir.DataType.FLOAT16 else np.float32
            base = f"{value.name}__a{self.serial}"
            scale_v = self._initializer(np.asarray(scale, dtype=np_dtype), base + "_scale")
            zp = self._initializer(np.asarray(0, dtype=np.int8), base + "_zp")
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
    """A copy of ``model`` (opset ≥ 19) with the plan's Q/DQ nodes; no other node changes.

    Scales take the dtype of the tensor they quantize: FP16 in an FP16 graph, FP32 in an FP32 one.

    Example:
        >>> has_qdq(apply_plan(model, plan))
        True
    """
    return apply_plan_in_place(ensure_opset(copy_model(model), QDQ_OPSET), plan)


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
                node.replace_input_with(q.index, writer.activation(value, q.scales[0], node))
    writer.finish()
    return out
