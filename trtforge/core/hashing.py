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
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()
