"""The quantized layers of a graph, read from its Q/DQ pattern: which scheme each Conv/Gemm/MatMul carries.

- INT8 Q/DQ on an activation input and INT8 weights: ``int8`` (W8A8);
- a DequantizeLinear on the weight only: ``int8_wo`` / ``int4_wo`` (INT4, blocked, opset 21);
- FLOAT8E4M3FN (or E5M2) Q/DQ: ``fp8``; FLOAT4E2M1: ``fp4``.

Whoever quantized the graph (trtforge's INT8/FP8/weight-only passes, Model Optimizer, a QAT export),
the builder plans from what the graph holds.

Example:
    >>> [(l.name, l.op_type, l.scheme) for l in quantized_layers(ir.from_proto(onnx.load("m_int8.onnx")))][:1]
    [('/conv1/Conv', 'Conv', 'int8')]
"""

from __future__ import annotations

import onnx_ir as ir

from trtforge.builder.capability import OP_CLASS_OF, QuantizedLayer
from trtforge.core.precisions import RECORDS

#: Ops between a DequantizeLinear and the layer that leave the values' type alone.
PASSTHROUGH: frozenset[str] = frozenset({"Transpose", "Reshape", "Identity", "Cast", "Flatten", "Squeeze",
                                         "Unsqueeze"})
#: Quantized ONNX dtype → the family it belongs to.
FAMILY: dict[ir.DataType, str] = {
    ir.DataType.INT8: "int8", ir.DataType.UINT8: "int8", ir.DataType.INT4: "int4", ir.DataType.UINT4: "int4",
    ir.DataType.FLOAT8E4M3FN: "fp8", ir.DataType.FLOAT8E4M3FNUZ: "fp8", ir.DataType.FLOAT8E5M2: "fp8",
    ir.DataType.FLOAT8E5M2FNUZ: "fp8", ir.DataType.FLOAT4E2M1: "fp4",
}


def _family(dtype: str | None) -> str | None:
    """A ``core.quant_plan.QUANT_DTYPES`` name (``"float8e4m3fn"``) → its family (``"fp8"``); None stays None."""
    return None if dtype is None else FAMILY[ir.DataType[dtype.upper()]]


#: (activation family, weight family) → scheme; None: that side is not quantized. Pairs a foreign graph may carry,
#: then each quantized precision's own pair from its record (a record's pair wins).
SCHEMES: dict[tuple[str | None, str | None], str] = {
    ("int8", None): "int8", ("int8", "int4"): "int8", ("fp8", None): "fp8", (None, "fp8"): "fp8",
    ("fp8", "int4"): "fp8", ("fp8", "int8"): "fp8", ("int8", "fp8"): "fp8", ("fp4", "fp4"): "fp4",
    ("fp4", None): "fp4", (None, "fp4"): "fp4",
    **{(_family(p.activation_dtype), _family(p.weight_dtype)): p.scheme for p in RECORDS if p.scheme},
}


def _dequantized(value: ir.Value | None) -> ir.Node | None:
    """The DequantizeLinear that ``value`` comes from (through shape-only ops), else None."""
    for _ in range(8):
        node = value.producer() if value is not None else None
        if node is None:
            return None
        if node.op_type == "DequantizeLinear":
            return node
        if node.op_type not in PASSTHROUGH or not node.inputs:
            return None
        value = node.inputs[0]
    return None


def _is_constant(value: ir.Value | None) -> bool:
    if value is None:
        return False
    if value.const_value is not None or value.is_initializer():
        return True
    node = value.producer()
    return node is not None and node.op_type == "Constant"


def _dtype(value: ir.Value | None) -> ir.DataType | None:
    """A value's dtype, from its tensor where a graph built in memory has not set it on the value yet."""
    if value is None:
        return None
    if value.dtype is not None:
        return value.dtype
    return value.const_value.dtype if value.const_value is not None else None


def _side(value: ir.Value | None) -> tuple[bool, str | None]:
    """(is a weight, quantized family or None) of one input of a layer."""
    dq = _dequantized(value)
    if dq is None:
        return _is_constant(value), None
    stored = dq.inputs[0]
    quantizer = stored.producer() if stored is not None else None
    if quantizer is not None and quantizer.op_type == "QuantizeLinear":
        return _is_constant(quantizer.inputs[0]), FAMILY.get(_dtype(stored)) or _q_family(quantizer)
    return _is_constant(stored), FAMILY.get(_dtype(stored)) if stored is not None else None


def _q_family(node: ir.Node) -> str | None:
    """A QuantizeLinear's output family from its zero point (or ``output_dtype``; default UINT8)."""
    if len(node.inputs) > 2 and _dtype(node.inputs[2]) is not None:
        return FAMILY.get(_dtype(node.inputs[2]))
    attr = node.attributes.get("output_dtype")
    return FAMILY.get(ir.DataType(attr.value)) if attr is not None and attr.value else "int8"


def quantized_layers(model: ir.Model) -> list[QuantizedLayer]:
    """Every top-level Conv/ConvTranspose/Gemm/MatMul with a Q/DQ on an input, and its scheme."""
    layers = []
    for node in model.graph:
        if node.op_type not in OP_CLASS_OF or node.domain not in ("", "ai.onnx"):
            continue
        activation = weight = None
        for value in node.inputs[:2]:
            is_weight, family = _side(value)
            if family is None:
                continue
            if is_weight:
                weight = weight or family
            else:
                activation = activation or family
        scheme = SCHEMES.get((activation, weight))
        if scheme is not None:
            name = node.name or (node.outputs[0].name if node.outputs else "?")
            layers.append(QuantizedLayer(name, node.op_type, scheme))
    return layers
