"""Nodes the user keeps in FP32 (``keep_fp32=`` / ``--keep-fp32 PATTERN``), handed to the float pass's plan.

Example:
    >>> plan = plan_float(model, "float16", kept_by_patterns(model, (r"^/head/",)))
    >>> plan.fp32_nodes["/head/Gemm"]
    "kept in FP32 by keep_fp32 pattern '^/head/'"
"""

from __future__ import annotations

import re

import onnx_ir as ir

from trtforge.core.errors import InvalidArgument
from trtforge.passes.graph import layer_label


def matches(node: ir.Node, pattern: str) -> bool:
    """``pattern`` is ``node``'s op type, or a regex found in its name, first output or layer label."""
    if pattern == node.op_type:
        return True
    names = (node.name, node.outputs[0].name if node.outputs else "", layer_label(node))
    return any(re.search(pattern, name or "") for name in names)


def kept_by_patterns(model: ir.Model, patterns: tuple[str, ...]) -> dict[str, str]:
    """``{node name: reason}`` for every node one of ``patterns`` ``matches``: what ``plan_float(keep=)``
    keeps in FP32 (with the initializers only those nodes read).

    A pattern that matches no node is refused, with a few node names to aim at.
    """
    nodes = [node for node in model.graph.all_nodes() if node.name]
    kept: dict[str, str] = {}
    for pattern in patterns:
        matched = [node.name for node in nodes if matches(node, pattern)]
        if not matched:
            raise InvalidArgument(f"keep_fp32 (or layer_precision ':fp32') pattern {pattern!r} matches no node; "
                                  "node names look like "
                                  f"{', '.join(repr(n.name) for n in nodes[:5])}")
        for name in matched:
            kept.setdefault(name, f"kept in FP32 by keep_fp32 pattern {pattern!r}")
    return kept
