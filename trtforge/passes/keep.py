"""Nodes the user keeps in FP32 by name (``keep_fp32=`` / ``--keep-fp32 PATTERN``), on top of the float pass's plan.

Example:
    >>> plan = keep_matching(model, plan_float(model, "float16"), (r"^/head/",))
    >>> plan.fp32_nodes["/head/Gemm"]
    "kept in FP32 by keep_fp32 pattern '^/head/'"
"""

from __future__ import annotations

import re
from dataclasses import replace

import onnx_ir as ir

from trtforge.core.errors import InvalidArgument
from trtforge.passes.float16 import FloatPlan
from trtforge.passes.graph import layer_label


def matches(node: ir.Node, pattern: str) -> bool:
    """``pattern`` is ``node``'s op type, or a regex found in its name, first output or layer label."""
    if pattern == node.op_type:
        return True
    names = (node.name, node.outputs[0].name if node.outputs else "", layer_label(node))
    return any(re.search(pattern, name or "") for name in names)


def keep_matching(model: ir.Model, plan: FloatPlan, patterns: tuple[str, ...]) -> FloatPlan:
    """``plan`` with every node one of ``patterns`` ``matches`` kept in FP32, the pattern as its reason.

    A pattern that matches no node is refused, with a few node names to aim at.
    """
    if not patterns:
        return plan
    nodes = [node for node in model.graph.all_nodes() if node.name]
    kept = dict(plan.fp32_nodes)
    for pattern in patterns:
        matched = [node.name for node in nodes if matches(node, pattern)]
        if not matched:
            raise InvalidArgument(f"keep_fp32 pattern {pattern!r} matches no node; node names look like "
                                  f"{', '.join(repr(n.name) for n in nodes[:5])}")
        for name in matched:
            kept.setdefault(name, f"kept in FP32 by keep_fp32 pattern {pattern!r}")
    return replace(plan, fp32_nodes=kept)
