"""Nodes the user keeps in FP32 by name (``keep_fp32=`` / ``--keep-fp32 PATTERN``), on top of the float pass's plan.

Example:
    >>> plan = keep_matching(model, plan_float(model, "float16"), (r"^/head/",))
    >>> plan.fp32_nodes["/head/Gemm"]
    "kept by keep_fp32 pattern '^/head/'"
"""

from __future__ import annotations

import re
from dataclasses import replace

import onnx_ir as ir

from trtforge.core.errors import InvalidArgument
from trtforge.passes.float16 import FloatPlan


def keep_matching(model: ir.Model, plan: FloatPlan, patterns: tuple[str, ...]) -> FloatPlan:
    """``plan`` with every node whose name matches one of ``patterns`` (``re.search``) kept in FP32.

    A pattern that matches no node is refused, with a few node names to aim at.
    """
    if not patterns:
        return plan
    names = [node.name for node in model.graph.all_nodes() if node.name]
    kept = dict(plan.fp32_nodes)
    for pattern in patterns:
        matched = [name for name in names if re.search(pattern, name)]
        if not matched:
            raise InvalidArgument(f"keep_fp32 pattern {pattern!r} matches no node; node names look like "
                                  f"{', '.join(repr(n) for n in names[:5])}")
        for name in matched:
            kept.setdefault(name, f"kept by keep_fp32 pattern {pattern!r}")
    return replace(plan, fp32_nodes=kept)
