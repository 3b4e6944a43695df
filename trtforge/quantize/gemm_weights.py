"""The weight-only layers that AWQ-lite and GPTQ rewrite, chosen once for both.

A layer qualifies when its weight is a 2-D constant at input 1, read by this layer alone, and the
layer has no ``transA``: its activation is input 0, and scaling or re-rounding the weight touches no
other layer.

Example:
    >>> [(layer.label, activation) for layer, weight, activation in weight_gemms(model, plan)]
    [('/encoder/layer.0/attention/self/query/MatMul', '/encoder/layer.0/LayerNorm_output_0'), ...]
"""

from __future__ import annotations

import onnx_ir as ir

from trtforge.core.quant_plan import QuantInput, QuantLayer, QuantPlan
from trtforge.passes.graph import attr, nodes_by_output


def weight_gemms(model: ir.Model, plan: QuantPlan) -> list[tuple[QuantLayer, QuantInput, str]]:
    """(layer, its weight input, the name of the activation it multiplies) for each qualifying layer."""
    nodes = nodes_by_output(model.graph)
    out = []
    for layer in plan.layers:
        w, node = layer.weight, nodes.get(layer.output)
        if w is None or node is None or w.index != 1 or len(layer.inputs) != 1:
            continue
        value = node.inputs[1]
        if value.const_value is None or len(value.uses()) != 1 or value.const_value.numpy().ndim != 2 \
                or attr(node, "transA", 0):
            continue
        out.append((layer, w, node.inputs[0].name))
    return out
