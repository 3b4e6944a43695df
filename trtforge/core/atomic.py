"""Atomic file writes: temp file in the same folder, fsync, then ``os.replace``.

Example:
    >>> atomic_write_bytes(Path("out/model.engine"), plan, mode=0o644)
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO


@contextlib.contextmanager
def atomic_writer(path: Path, mode: int | None = None) -> Iterator[BinaryIO]:
    """Yield a binary file; on success it replaces ``path`` atomically, on error it vanishes."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_bytes(path: Path, data: bytes, mode: int | None = None) -> None:
    """Write ``data`` to ``path`` atomically (readers see the old file or the new, never half)."""
    with atomic_writer(path, mode) as handle:
        handle.write(data)
