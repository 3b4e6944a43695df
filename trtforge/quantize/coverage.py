"""INT8 coverage: the share of Conv/ConvTranspose/MatMul/Gemm multiply-accumulates run in INT8.

Works on any Q/DQ graph (ours, Model Optimizer's, onnxruntime's): a MAC layer counts as INT8
when every float data input comes from a DequantizeLinear (through Transpose/Reshape at most).
MAC counts come from the FP32 graph run once on a sample batch.

Example:
    >>> macs = mac_counts(fp32_model, {"images": x[:1]})
    >>> int8_coverage(qdq_model, macs)
    0.93
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir

from trtforge.passes.graph import load_ir, values_by_name
from trtforge.passes.ops import MAC_OPS, SHAPE_OPS
from trtforge.quantize.macs import layer_macs
from trtforge.quantize.observers import observe
from trtforge.quantize.placement import analyse


def mac_counts(model: ir.Model | onnx.ModelProto, batch: dict[str, np.ndarray]) -> dict[str, int]:
    """Per-sample MACs of every MAC layer of the FP32 ``model``, keyed by its output name."""
    model = load_ir(model)
    analysis = analyse(model)
    names = [c.output for c in analysis.candidates] + [n for c in analysis.candidates for _, n in c.activations]
    stats = observe(model, [], [batch], shapes_of=list(dict.fromkeys(names)))
    values = values_by_name(model.graph)
    return {c.output: layer_macs(c, values, stats.shapes) for c in analysis.candidates}


def _from_dq(value: ir.Value | None, depth: int = 3) -> bool:
    for _ in range(depth):
        node = value.producer() if value is not None else None
        if node is None:
            return False
        if node.op_type == "DequantizeLinear":
            return True
        if node.op_type not in SHAPE_OPS:
            return False
        value = node.inputs[0]
    return False


def int8_layers(qdq: ir.Model | onnx.ModelProto, weights_only: bool = False) -> set[str]:
    """Outputs of the MAC layers of ``qdq`` whose float inputs all come from DequantizeLinear (any quantized
    dtype); ``weights_only``: whose weight (input B, not from a QuantizeLinear) comes from DequantizeLinear."""
    out = set()
    for node in load_ir(qdq).graph:
        if node.op_type not in MAC_OPS:
            continue
        data = [value for value in node.inputs[:2] if value is not None and value.name]
        if weights_only:
            data = [v for v in node.inputs[1:2] if v is not None and v.name and _from_dq(v) and not _from_q(v)]
            if data:
                out.add(node.outputs[0].name)
        elif data and all(_from_dq(value) for value in data):
            out.add(node.outputs[0].name)
    return out


def _from_q(value: ir.Value) -> bool:
    """Whether the DequantizeLinear that feeds ``value`` reads a QuantizeLinear (an activation, not a weight)."""
    node = value.producer()
    while node is not None and node.op_type != "DequantizeLinear":
        node = node.inputs[0].producer() if node.inputs and node.inputs[0] is not None else None
    source = node.inputs[0].producer() if node is not None else None
    return source is not None and source.op_type == "QuantizeLinear"


def int8_coverage(qdq: ir.Model | onnx.ModelProto, macs: dict[str, int], weights_only: bool = False) -> float:
    """Share of ``macs`` (from ``mac_counts``) in the layers ``qdq`` runs quantized (``weights_only``: whose
    weights it quantizes)."""
    total = sum(macs.values())
    if not total:
        return 0.0
    return sum(macs.get(o, 0) for o in int8_layers(qdq, weights_only)) / total
