"""TensorRT-RTX runtime-cache files: the kernels its JIT compiled for one engine on one GPU, kept on disk.

TensorRT-RTX compiles an engine's kernels for the GPU at hand when a context first runs (the
"JIT" step; seconds for a CNN). ``IRuntimeCache.serialize()`` returns those kernels; a later
process that hands them back (``deserialize``) skips the compilation. A blob only fits the same
engine, GPU and TensorRT-RTX release (``deserialize`` checks and refuses others), so the file is
keyed by all three.

Layout: ``<engine cache folder>/runtime/<key>.bin`` (the engine cache's folder:
``$TRTFORGE_CACHE_DIR`` or ``~/.cache/trtforge/engines``). Files are written atomically; a file
that cannot be read counts as absent, and one that cannot be written is a warning, never an error.

The TensorRT route takes a ``RuntimeCacheStore`` (``runtime_cache=``) and asks it by the key
fields; it never imports this package (routes know nothing of caches).

Example:
    >>> store = RuntimeCacheStore()
    >>> facts = {"engine_sha256": sidecar.engine_sha256, "gpu": "NVIDIA GeForce RTX 4090 sm89",
    ...          "flavour": "tensorrt_rtx 1.7.1.116"}
    >>> store.load(**facts) is None          # first process: nothing yet
    True
    >>> store.save(blob, **facts)            # the route does this on close()
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path

from trtforge.cache.engine_cache import default_cache_dir
from trtforge.core.atomic import atomic_write_bytes

log = logging.getLogger("trtforge")

#: Sub-folder of the engine cache folder that holds runtime-cache files.
RUNTIME_FOLDER = "runtime"


def runtime_cache_key(engine_sha256: str, gpu: str, flavour: str) -> str:
    """sha256 over what a blob depends on: the engine's bytes, the GPU, the TensorRT flavour and version.

    Example:
        >>> runtime_cache_key("ab" * 32, "NVIDIA GeForce RTX 4090 sm89", "tensorrt_rtx 1.7.1.116")[:12]
        '5c7a2f0e9b1d'
    """
    fields = {"engine_sha256": engine_sha256, "gpu": gpu, "flavour": flavour}
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


class RuntimeCacheStore:
    """Runtime-cache blobs on disk, keyed by ``runtime_cache_key`` (see the module docstring).

    The TensorRT route calls ``load(engine_sha256=..., gpu=..., flavour=...)`` and ``save(blob, ...)``.
    """

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        self.directory = Path(directory).expanduser() if directory is not None else default_cache_dir() / RUNTIME_FOLDER

    def path(self, engine_sha256: str, gpu: str, flavour: str) -> Path:
        return self.directory / f"{runtime_cache_key(engine_sha256, gpu, flavour)}.bin"

    def load(self, engine_sha256: str, gpu: str, flavour: str) -> bytes | None:
        """The stored blob, or None when there is none (or it cannot be read)."""
        path = self.path(engine_sha256, gpu, flavour)
        try:
            return path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning("runtime cache %s unreadable (%s); the kernels will be compiled again", path, exc)
            return None

    def save(self, blob: bytes, engine_sha256: str, gpu: str, flavour: str) -> Path | None:
        """Write ``blob`` atomically; a failure (full disk, read-only folder) is a warning, not an error."""
        path = self.path(engine_sha256, gpu, flavour)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(path, bytes(blob))
        except OSError as exc:
            log.warning("could not store the runtime cache at %s (%s); the next process compiles again", path, exc)
            return None
        return path
