"""The complete converter table (every op family imported) and the hash of the converters' source.

Example:
    >>> len(all_converters()) >= 100
    True
    >>> source_hash()[:12]                  # goes into an engine-cache key
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
from pathlib import Path

from trtforge.convert.registry import REGISTRY, Converter

#: Modules besides the op families whose source decides what a converted network looks like.
LOWERING_MODULES = ("trtforge.convert.network", "trtforge.convert.context", "trtforge.convert.lower",
                    "trtforge.convert.registry")


def all_converters() -> dict[str, Converter]:
    """Import every op family so the registry is complete; returns it."""
    from trtforge.convert import ops  # noqa: F401  (registers by import)

    return REGISTRY


@functools.cache
def source_hash() -> str:
    """sha256 over the source of every converter module and the lowering: a converter change changes
    this, so it belongs in the engine-cache key (a stale engine is never served)."""
    all_converters()
    names = sorted({c.fn.__module__ for c in REGISTRY.values()} | set(LOWERING_MODULES))
    digest = hashlib.sha256()
    for name in names:
        digest.update(name.encode())
        digest.update(Path(importlib.util.find_spec(name).origin).read_bytes())
    return digest.hexdigest()
