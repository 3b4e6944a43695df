"""sha256 of files, read in chunks: the one digest the sidecar, the caches and the routes compare.

Example:
    >>> sha256_file(Path("out/model_fp16.engine"))[:12]
    '3f1c0a9b2d4e'
"""

from __future__ import annotations

import hashlib
from pathlib import Path


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    """Hex sha256 of the file at ``path``."""
    return sha256_and_find(path, b"", chunk)[0]


def sha256_and_find(path: Path, needle: bytes, chunk: int = 1 << 20) -> tuple[str, bool]:
    """Hex sha256 of the file at ``path`` and whether ``needle`` occurs in it, in one read.

    Example:
        >>> sha256_and_find(Path("model.onnx"), b"location")[1]     # can it name external data?
        False
    """
    digest, found, tail = hashlib.sha256(), False, b""
    keep = max(len(needle) - 1, 0)
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
            if needle and not found:
                joined = tail + block
                found, tail = needle in joined, joined[-keep:] if keep else b""
    return digest.hexdigest(), found
