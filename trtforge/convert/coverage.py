"""Coverage, without building: every op of the exported graph as converted, folded (computed at
conversion time), refused (with the validator's reason) or unsupported, and the partitions the
direct path would make.

Example:
    >>> report = coverage(model, (torch.randn(1, 3, 224, 224),))
    >>> print(report.table())
    >>> report.fraction                     # converted + folded over all ops
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import torch

from trtforge.convert.lower import export_program
from trtforge.convert.partition import node_status, propose
from trtforge.convert.registry import Settings, target_name
from trtforge.core.partition_options import DEFAULT_MIN_BLOCK_SIZE


@dataclass(frozen=True)
class CoverageReport:
    """Op name → count per status, refusal reasons per op, and the proposed engine partitions
    (each a list of node names)."""

    converted: dict[str, int] = field(default_factory=dict)
    folded: dict[str, int] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)
    unsupported: dict[str, int] = field(default_factory=dict)
    partitions: tuple[tuple[str, ...], ...] = ()

    @property
    def fraction(self) -> float:
        done = sum(self.converted.values()) + sum(self.folded.values())
        total = done + sum(self.unsupported.values()) + len(self.refused)
        return done / total if total else 1.0

    def rows(self) -> list[tuple[str, str, str]]:
        """``(op, status, count or reason)`` per row: converted, folded, refused, unsupported."""
        rows = [(op, "converted", str(n)) for op, n in sorted(self.converted.items())]
        rows += [(op, "folded", str(n)) for op, n in sorted(self.folded.items())]
        rows += [(node, "refused", reason) for node, reason in sorted(self.refused.items())]
        rows += [(op, "unsupported", str(n)) for op, n in sorted(self.unsupported.items())]
        return rows

    def table(self) -> str:
        """A plain-text table: op, status, count or reason; then the partitions."""
        rows = self.rows()
        width = max((len(r[0]) for r in rows), default=2)
        lines = [f"{'op'.ljust(width)}  {'status':<11}  count / reason"]
        lines += [f"{op.ljust(width)}  {status:<11}  {detail}" for op, status, detail in rows]
        lines.append(f"coverage {self.fraction:.1%}; {len(self.partitions)} engine partition(s): "
                     + ", ".join(str(len(p)) + " nodes" for p in self.partitions))
        return "\n".join(lines)


def coverage(model: torch.nn.Module, example_inputs: tuple, *, batch: tuple[int, int, int] | None = None,
             min_block_size: int = DEFAULT_MIN_BLOCK_SIZE, precision: str = "fp32") -> CoverageReport:
    """Export ``model`` and classify every op as a ``precision`` conversion would (validators may refuse by
    precision); nothing is built."""
    from trtforge.convert.api import precision_dtype

    settings = Settings(compute=precision_dtype(precision))
    module = export_program(model, example_inputs, batch).module()
    partitions = propose(module, min_block_size, settings)
    counts: dict[str, Counter] = {"converted": Counter(), "folded": Counter(), "unsupported": Counter()}
    refused: dict[str, str] = {}
    for node in (n for n in module.graph.nodes if n.op == "call_function"):
        status, reason = node_status(node, settings)
        if status == "refused":
            refused[f"{target_name(node)} ({node.name})"] = reason
        else:
            counts[status][target_name(node)] += 1
    return CoverageReport(
        converted=dict(counts["converted"]), folded=dict(counts["folded"]), refused=refused,
        unsupported=dict(counts["unsupported"]),
        partitions=tuple(tuple(n.name for n in run) for run in partitions))
