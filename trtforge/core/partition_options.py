"""The direct path's partitioning options (``CompileConfig.min_block_size`` and ``torch_executed_ops``), checked.

Example:
    >>> op_names(["aten.softmax.int", "aten.relu"])
    ('aten.softmax.int', 'aten.relu')
    >>> check_min_block_size(None) is None
    True
"""

from __future__ import annotations

import re
from typing import Any

from trtforge.core.errors import InvalidArgument, spelled

#: An op that ``torch_executed_ops`` keeps in PyTorch: ``aten.NAME`` or ``aten.NAME.OVERLOAD``.
OP_NAME = re.compile(r"aten\.[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?")
#: The fewest compute ops in an engine partition when ``torch_executed_ops`` partitions without ``min_block_size``.
DEFAULT_MIN_BLOCK_SIZE = 3


def check_min_block_size(value: Any) -> int | None:
    """None (no partitioning) or a positive integer; anything else is refused in one line."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidArgument(spelled(cli=f"--min-block-size {value}", python=f"min_block_size={value!r}")
                              + ": give a positive integer (the fewest compute ops in an engine partition, e.g. "
                              f"{DEFAULT_MIN_BLOCK_SIZE}), or leave it out")
    return value


def op_names(value: Any) -> tuple[str, ...]:
    """ATen op names as the exported graph names them (``aten.softmax.int``; ``aten.softmax`` covers every
    overload), checked, each once."""
    names = tuple((value,) if isinstance(value, str) else value or ())
    for name in names:
        if not isinstance(name, str) or not OP_NAME.fullmatch(name):
            raise InvalidArgument(spelled(cli=f"--torch-executed-op {name}", python=f"torch_executed_ops={name!r}")
                                  + ": name an op as the exported graph does, aten.NAME or aten.NAME.OVERLOAD (e.g. "
                                  "aten.softmax.int); `trtforge coverage` lists a model's ops")
    return tuple(dict.fromkeys(names))


def is_torch_executed(op: str, names: tuple[str, ...]) -> bool:
    """Whether op ``op`` (``aten.softmax.int``) is one that ``names`` keeps in PyTorch.

    Example:
        >>> is_torch_executed("aten.softmax.int", ("aten.softmax",)), is_torch_executed("aten.relu.default", ())
        (True, False)
    """
    return any(op == name or op.startswith(name + ".") for name in names)
