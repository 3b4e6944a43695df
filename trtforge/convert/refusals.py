"""Ops the direct path refuses on purpose, as data: why no converter can exist, and what to do instead.

An op with no converter is refused by ``compile(path="direct")`` in one line; for the ops of this table the line
says why (``NO_CONVERTER``) and gives their own fix, in CLI or Python terms. ``data_dependent`` marks the nodes
whose sizes depend on the data (an unbacked symbol, such as the count ``torchvision.ops.nms`` returns): an engine's
shapes come from its profiles, so partitioning keeps them in PyTorch.

Example:
    >>> NO_CONVERTER["torchvision.nms.default"].calls
    'torchvision.ops.nms or batched_nms'
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trtforge.core.errors import spelled

#: The reason partitioning gives a node whose value or inputs have a data-dependent size.
DATA_DEPENDENT = "a size that depends on the data (after nms, nonzero, ...); an engine's shapes are fixed by its profiles"


@dataclass(frozen=True)
class KnownRefusal:
    """Why an op has no converter, and the fix in each reader's terms (``core.errors.spelled``)."""

    calls: str  # what the user's code called
    why: str
    cli: str
    python: str

    def fix(self) -> str:
        return spelled(cli=self.cli, python=self.python)


_NMS = KnownRefusal(
    calls="torchvision.ops.nms or batched_nms",
    why="its output size depends on the data, and an engine's shapes are fixed",
    cli="end the model at the boxes (N, A, 4) and scores (N, A, C) and build without --path direct, with "
        "--nms boxes-scores (an ONNX file: cut it there with --outputs NAME,NAME; docs/tutorial-detect.md), "
        "or keep it in PyTorch with --min-block-size 3 (partitions the module)",
    python="end forward() at the boxes (N, A, 4) and scores (N, A, C) and build with path='onnx', "
           "postprocess=trtforge.NMS('boxes-scores') (an ONNX file: cut it there with outputs=[...]; "
           "docs/tutorial-detect.md), or keep it in PyTorch with min_block_size=3 (partitions the module)",
)

#: ATen-style target → why it has no converter and what to do instead.
NO_CONVERTER: dict[str, KnownRefusal] = {
    "torchvision.nms.default": _NMS,
}


def no_converter_line(name: str, node: torch.fx.Node) -> str | None:
    """The one-line refusal of a node of ``NO_CONVERTER``, or None for any other op.

    Example:
        >>> no_converter_line("torchvision.nms.default", node)[:40]
        'torchvision.nms.default (node nms: torc'
    """
    known = NO_CONVERTER.get(name)
    if known is None:
        return None
    return f"{name} (node {node.name}: {known.calls}) has no converter: {known.why}; {known.fix()}"


def data_dependent(node: torch.fx.Node) -> bool:
    """Whether ``node``'s value or an input's has a data-dependent size (an unbacked symbol of the export)."""
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    values = [node.meta.get("val")] + [n.meta.get("val") for n in node.all_input_nodes]
    return any(free_unbacked_symbols(v) for v in values if v is not None)
