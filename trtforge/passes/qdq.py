"""The frozen ``QuantPlan`` (which layers run quantized, in which dtype, with which scales) and ``apply_plan``.

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

from dataclasses import dataclass, replace

import ml_dtypes
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
#: Opset that allows INT4 and ``block_size`` on DequantizeLinear.
BLOCKED_OPSET = 21


@dataclass(frozen=True)
class QuantDtype:
    """A quantized ONNX type: its numpy (ml_dtypes) type, the largest magnitude kept, and whether values round
    to integers (INT8/INT4) or to the nearest representable float (FP8)."""

    name: str
    numpy: type
    qmax: float
    integer: bool
    opset: int


#: The quantized dtypes a plan may use, by name (the names ONNX gives them, lower case).
QUANT_DTYPES: dict[str, QuantDtype] = {
    "int8": QuantDtype("int8", np.int8, 127.0, True, QDQ_OPSET),
    "float8e4m3fn": QuantDtype("float8e4m3fn", ml_dtypes.float8_e4m3fn, 448.0, False, QDQ_OPSET),
    "int4": QuantDtype("int4", ml_dtypes.int4, 7.0, True, BLOCKED_OPSET),
}


def fp16_scales(values) -> tuple[float, ...]:
    """Scales clamped to [MIN_SCALE, 65504] and rounded to FP16-representable floats."""
    arr = np.clip(np.asarray(values, dtype=np.float32), MIN_SCALE, 65504.0)
    return tuple(float(v) for v in arr.astype(np.float16).astype(np.float32))


@dataclass(frozen=True)
class QuantInput:
    """One quantized input of a layer: per-tensor (axis None), per-channel (``axis``) or blocked scales.

    Blocked (``block_size`` set): ``scales`` hold the scale tensor flattened, shaped ``scale_shape`` (the
    weight's shape with ``axis``, the blocked reduction axis, divided by ``block_size``).
    """

    index: int
    tensor: str
    scales: tuple[float, ...]
    axis: int | None = None
    is_weight: bool = False
    dtype: str = "int8"
    block_size: int | None = None
    scale_shape: tuple[int, ...] | None = None

    @property
    def qtype(self) -> QuantDtype:
        return QUANT_DTYPES[self.dtype]

    @property
    def opset(self) -> int:
        return max(self.qtype.opset, BLOCKED_OPSET if self.block_size else QDQ_OPSET)

    def scale_array(self, dtype=np.float32) -> np.ndarray:
        """The scales shaped as DequantizeLinear reads them (0-d, 1-D, or blocked)."""
        arr = np.asarray(self.scales, dtype=dtype)
        if self.block_size:
            return arr.reshape(self.scale_shape)
        return arr.reshape((len(self.scales),) if self.axis is not None else ())


@dataclass(frozen=True)
class QuantLayer:
    """A Conv/ConvTranspose/MatMul/Gemm layer that runs quantized (weight-only: its weight alone)."""

    output: str
    op_type: str
    label: str
    inputs: tuple[QuantInput, ...]
    macs: int = 0


@dataclass(frozen=True)
class QuantPlan:
    """Everything the Q/DQ pass needs, and what the report says about it.

    ``precision`` is the build precision the plan is for (``int8``, ``fp8``, ``int8-wo``, ``int4-wo``);
    each input carries its own quantized dtype.
    """

    layers: tuple[QuantLayer, ...]
    excluded: tuple[tuple[str, str], ...] = ()  # (label, reason)
    calibrator: str = "entropy"
    total_macs: int = 0
    precision: str = "int8"

    @property
    def quantized_macs(self) -> int:
        return sum(layer.macs for layer in self.layers)

    @property
    def coverage(self) -> float:
        """Share of Conv/ConvTranspose/MatMul/Gemm multiply-accumulates that run quantized."""
        return self.quantized_macs / self.total_macs if self.total_macs else 0.0

    @property
    def opset(self) -> int:
        """The lowest opset that holds every Q/DQ node of the plan (19; 21 for INT4 or blocks)."""
        return max((q.opset for layer in self.layers for q in layer.inputs), default=QDQ_OPSET)

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

    def replaced(self, outputs, fallback: QuantPlan, reason: str) -> QuantPlan:
        """A plan with the layers whose outputs are in ``outputs`` as ``fallback`` quantizes them (a more
        accurate precision: ``precision="auto"``'s next rung), or moved back to FP16 where it has none."""
        swap = {layer.output: layer for layer in fallback.layers if layer.output in set(outputs)}
        out = self.without(set(outputs) - set(swap), reason)
        return replace(out, layers=tuple(swap.get(layer.output, layer) for layer in out.layers))

    def to_dict(self) -> dict:
        return {
            "precision": self.precision,
            "calibrator": self.calibrator,
            "coverage": self.coverage,
            "layers": [
                {"output": layer.output, "op": layer.op_type, "label": layer.label, "macs": layer.macs,
                 "inputs": [{"index": q.index, "tensor": q.tensor, "axis": q.axis, "weight": q.is_weight,
                             "dtype": q.dtype, "block_size": q.block_size,
                             "scales": list(q.scales) if q.axis is None or len(q.scales) <= 8 else len(q.scales)}
                            for q in layer.inputs]}
                for layer in self.layers
            ],
            "excluded": [list(e) for e in self.excluded],
        }


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
