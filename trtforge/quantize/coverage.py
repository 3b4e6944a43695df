"""INT8 coverage: the share of Conv/ConvTranspose/MatMul/Gemm multiply-accumulates run in INT8.

Works on any Q/DQ graph (ours, Model Optimizer's, onnxruntime's): a MAC layer counts as INT8
when every float data input comes from a DequantizeLinear (through Transpose/Reshape at most).
MAC counts come from the FP32 graph run once on a sample batch.

Example:
    >>> macs = mac_counts(fp32_proto, {"images": x[:1]})
    >>> int8_coverage(qdq_proto, macs)
    0.93
"""

from __future__ import annotations

import numpy as np
import onnx

from trtforge.quantize.graph_tools import MAC_OPS, SHAPE_OPS, GraphIndex
from trtforge.quantize.observers import observe
from trtforge.quantize.placement import analyse


def mac_counts(model: onnx.ModelProto, batch: dict[str, np.ndarray]) -> dict[str, int]:
    """Per-sample MACs of every MAC layer of the FP32 ``model``, keyed by its output name."""
    from trtforge.quantize.api import _macs

    analysis = analyse(model)
    index = GraphIndex(model)
    names = [c.output for c in analysis.candidates] + [n for c in analysis.candidates for _, n in c.activations]
    stats = observe(model, [], [batch], shapes_of=list(dict.fromkeys(names)))
    return {c.output: _macs(c, index, stats.shapes) for c in analysis.candidates}


def _from_dq(index: GraphIndex, name: str, depth: int = 3) -> bool:
    for _ in range(depth):
        node = index.producer.get(name)
        if node is None:
            return False
        if node.op_type == "DequantizeLinear":
            return True
        if node.op_type not in SHAPE_OPS:
            return False
        name = node.input[0]
    return False


def int8_layers(qdq: onnx.ModelProto) -> set[str]:
    """Outputs of the MAC layers of ``qdq`` whose float inputs all come from DequantizeLinear."""
    index = GraphIndex(qdq)
    out = set()
    for node in qdq.graph.node:
        if node.op_type not in MAC_OPS:
            continue
        data = [name for name in node.input[:2] if name]
        if data and all(_from_dq(index, name) for name in data):
            out.add(node.output[0])
    return out


def int8_coverage(qdq: onnx.ModelProto, macs: dict[str, int]) -> float:
    total = sum(macs.values())
    if not total:
        return 0.0
    return sum(macs.get(o, 0) for o in int8_layers(qdq)) / total
