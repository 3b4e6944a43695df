"""Integer inputs that index a table (token ids into an embedding), checked against the table's rows before a run.

ONNX Runtime's Gather fails half-way through a run on an index past the table; calibration, ``check --inputs`` and
``compare --inputs`` refuse such data first, in one line that names the input, the index and the table.

Example:
    >>> overflow = index_overflow(model, [{"input_ids": np.array([[5000]])}])   # a vocabulary of 1000
    >>> overflow.describe("--inputs input")
    "--inputs input 'input_ids' holds index 5000, and node 'Gather_0' (Gather) looks it up in a table of 1000 rows ..."
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx_ir as ir


@dataclass(frozen=True)
class IndexOverflow:
    """An input's index that lies outside the table a Gather looks it up in."""

    input: str
    index: int
    node: str
    rows: int

    def describe(self, what: str) -> str:
        """The refusal line; ``what`` names the data in the reader's terms ("calibration input", "--inputs input")."""
        return (f"{what} {self.input!r} holds index {self.index}, and node {self.node!r} (Gather) looks it up in a "
                f"table of {self.rows} rows (valid: {-self.rows}..{self.rows - 1}); give ids the model knows, "
                "e.g. from its own tokenizer")


def _table_rows(node: ir.Node, index: int) -> int | None:
    table = node.inputs[0] if node.op_type == "Gather" and index == 1 else None
    if table is None or table.shape is None:
        return None
    axis = node.attributes.get_int("axis", 0)
    rows = table.shape[axis] if -table.shape.rank() <= axis < table.shape.rank() else None
    return rows if isinstance(rows, int) else None


def table_rows(value: ir.Value) -> int | None:
    """The rows of the smallest table a Gather looks ``value`` up in (its valid ids: ``0..rows - 1``), else None.

    Example:
        >>> table_rows(model.graph.inputs[0])  # input_ids into a vocabulary of 1000
        1000
    """
    rows = [r for node, index in value.uses() if (r := _table_rows(node, index)) is not None]
    return min(rows, default=None)


def index_overflow(model: ir.Model, samples: Sequence[Mapping[str, np.ndarray]]) -> IndexOverflow | None:
    """The first integer graph input of ``samples`` that a Gather reads past its table's rows, else None."""
    for value in model.graph.inputs:
        if value.dtype not in (ir.DataType.INT64, ir.DataType.INT32) or not samples or value.name not in samples[0]:
            continue
        arrays = [np.asarray(s[value.name]) for s in samples if np.asarray(s[value.name]).size]
        if not arrays:
            continue
        low, high = min(int(a.min()) for a in arrays), max(int(a.max()) for a in arrays)
        for node, index in value.uses():
            rows = _table_rows(node, index)
            if rows is not None and (low < -rows or high >= rows):
                return IndexOverflow(value.name, high if high >= rows else low, node.name or node.op_type, rows)
    return None
