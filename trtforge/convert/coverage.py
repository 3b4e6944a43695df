"""Coverage, without building: every op of the exported graph as converted, folded (computed at
conversion time), refused (with the validator's reason), unsupported, or kept in PyTorch by
``torch_executed_ops``; and the blocks partitioning would make, each an engine or (below
``min_block_size``) left in PyTorch, split by the same code ``compile(path="direct")`` partitions with.

Example:
    >>> report = coverage(model, (torch.randn(1, 3, 224, 224),), min_block_size=2,
    ...                   torch_executed_ops=("aten.softmax",))
    >>> print(report.table())
    >>> report.fraction                     # converted + folded over all ops
    >>> [(b.name, b.compute, b.engine) for b in report.blocks]
    [('fused_0', 5, True), ('fused_1', 1, False)]
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import torch

from trtforge.convert.lower import export_program, mark_constants
from trtforge.convert.partition import blocks, fuse, node_status
from trtforge.convert.registry import Settings, target_name
from trtforge.core.partition_options import (
    DEFAULT_MIN_BLOCK_SIZE,
    check_min_block_size,
    is_torch_executed,
    op_names,
)

#: The status of an op that ``torch_executed_ops`` keeps in PyTorch (whether or not it has a converter).
FORCED = "torch-executed"


@dataclass(frozen=True)
class Block:
    """One run of supported ops the partitioner fuses: its name in the partitioned module (``fused_N``), its
    nodes in graph order, its compute-op count, and whether it becomes an engine (else it runs in PyTorch)."""

    name: str
    nodes: tuple[str, ...]
    compute: int
    engine: bool


@dataclass(frozen=True)
class CoverageReport:
    """Op name → count per status, refusal reasons per op, the ops kept in PyTorch by ``torch_executed_ops``,
    and the blocks at ``min_block_size``."""

    converted: dict[str, int] = field(default_factory=dict)
    folded: dict[str, int] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)
    unsupported: dict[str, int] = field(default_factory=dict)
    #: op → nodes that ``torch_executed_ops`` keeps in PyTorch
    forced: dict[str, int] = field(default_factory=dict)
    blocks: tuple[Block, ...] = ()
    min_block_size: int = DEFAULT_MIN_BLOCK_SIZE

    @property
    def fraction(self) -> float:
        done = sum(self.converted.values()) + sum(self.folded.values())
        total = done + sum(self.unsupported.values()) + len(self.refused) + sum(self.forced.values())
        return done / total if total else 1.0

    @property
    def partitions(self) -> tuple[tuple[str, ...], ...]:
        """The node names of each block that becomes an engine."""
        return tuple(b.nodes for b in self.blocks if b.engine)

    @property
    def fallback(self) -> tuple[Block, ...]:
        """The blocks below ``min_block_size``: supported, but run in PyTorch."""
        return tuple(b for b in self.blocks if not b.engine)

    def rows(self) -> list[tuple[str, str, str]]:
        """``(op, status, count or reason)`` per row: converted, folded, refused, unsupported, torch-executed."""
        rows = [(op, "converted", str(n)) for op, n in sorted(self.converted.items())]
        rows += [(op, "folded", str(n)) for op, n in sorted(self.folded.items())]
        rows += [(node, "refused", reason) for node, reason in sorted(self.refused.items())]
        rows += [(op, "unsupported", str(n)) for op, n in sorted(self.unsupported.items())]
        rows += [(op, FORCED, str(n)) for op, n in sorted(self.forced.items())]
        return rows

    def block_rows(self) -> list[tuple[str, str, str, str]]:
        """``(block, compute ops, first … last node, what it becomes)`` per block, in graph order."""
        return [(b.name, str(b.compute), f"{b.nodes[0]} … {b.nodes[-1]}" if len(b.nodes) > 1 else b.nodes[0],
                 "engine" if b.engine else f"PyTorch ({b.compute} < min_block_size {self.min_block_size})")
                for b in self.blocks]

    def table(self) -> str:
        """A plain-text table: op, status, count or reason; then the blocks."""
        rows = self.rows()
        width = max((len(r[0]) for r in rows), default=2)
        lines = [f"{'op'.ljust(width)}  {'status':<14}  count / reason"]
        lines += [f"{op.ljust(width)}  {status:<14}  {detail}" for op, status, detail in rows]
        lines.append(f"coverage {self.fraction:.1%}; {len(self.partitions)} engine partition(s): "
                     + ", ".join(str(len(p)) + " nodes" for p in self.partitions))
        lines += [f"  {name}: {count} compute op(s), {nodes}: {becomes}" for name, count, nodes, becomes
                  in self.block_rows()]
        return "\n".join(lines)


def coverage(model: torch.nn.Module, example_inputs: tuple, *, batch: tuple[int, int, int] | None = None,
             min_block_size: int = DEFAULT_MIN_BLOCK_SIZE, precision: str = "fp32",
             torch_executed_ops: tuple[str, ...] = ()) -> CoverageReport:
    """Export ``model`` and classify every op as a ``precision`` conversion would (validators may refuse by
    precision), ``torch_executed_ops`` kept in PyTorch; then fuse the supported runs as partitioning does.
    Nothing is built."""
    from trtforge.convert.api import precision_dtype

    block_size = check_min_block_size(min_block_size) or DEFAULT_MIN_BLOCK_SIZE
    forced_ops = op_names(torch_executed_ops)
    settings = Settings(compute=precision_dtype(precision))
    module = export_program(model, example_inputs, batch).module()
    mark_constants(module.graph, {})
    counts: dict[str, Counter] = {s: Counter() for s in ("converted", "folded", "unsupported", FORCED)}
    refused: dict[str, str] = {}
    for node in (n for n in module.graph.nodes if n.op == "call_function"):
        status, reason = node_status(node, settings)
        if is_torch_executed(target_name(node), forced_ops):
            status = FORCED
        if status == "refused":
            refused[f"{target_name(node)} ({node.name})"] = reason
        else:
            counts[status][target_name(node)] += 1
    runs = tuple(Block(name=node.target, compute=count, engine=count >= block_size,
                       nodes=tuple(n.name for n in sub.graph.nodes if n.op == "call_function"))
                 for node, sub, count in blocks(fuse(module, precision, forced_ops)))
    return CoverageReport(
        converted=dict(counts["converted"]), folded=dict(counts["folded"]), refused=refused,
        unsupported=dict(counts["unsupported"]), forced=dict(counts[FORCED]), blocks=runs, min_block_size=block_size)
