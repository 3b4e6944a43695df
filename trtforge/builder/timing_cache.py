"""A TensorRT timing cache on disk: loaded before a build, merged and written back after it.

Full TensorRT records which kernel won for each layer; a warm timing cache makes later builds of
similar networks much faster. The file is TensorRT's own format (``trtexec --timingCacheFile``
reads it). Reads and writes happen under a file lock (``PATH.lock``); the write is atomic, and
timings found by other processes meanwhile are merged, not lost. A corrupt cache, or one from
another TensorRT version, is logged and replaced.

TensorRT-RTX has no timing cache (its operations are no-ops): the option is accepted, its path
is still checked, and one log line per process says it is ignored.

Example:
    >>> path = check_timing_cache_path("~/.cache/trtforge/timing.cache")
    >>> with TimingCacheSession(path) as session:        # in build_engine
    ...     session.attach(builder_config)
    ...     plan = builder.build_serialized_network(network, builder_config)
    ...     session.save()
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from filelock import FileLock

from trtforge.core import trt
from trtforge.core.atomic import atomic_write_bytes
from trtforge.core.errors import InvalidArgument, NotPermitted, spelled

log = logging.getLogger(__name__)

#: Seconds to wait for another process's lock on the same timing cache before giving up.
LOCK_TIMEOUT_S = 600.0

#: Every TensorRT attribute used here ("Class.attribute"); tests check each against the bindings.
TRT_API_USED: tuple[str, ...] = (
    "IBuilderConfig.create_timing_cache", "IBuilderConfig.set_timing_cache", "ITimingCache.combine",
    "ITimingCache.serialize", "ITimingCache.queryKeys",
)

_said_ignored = False


def check_timing_cache_path(path: str | os.PathLike[str]) -> Path:
    """Refuse a timing-cache location before any build starts; return it expanded.

    A directory, or a path ending in a separator, is an ``InvalidArgument`` (a ``ValueError``); a location whose folder
    cannot be created or written is an ``OSError``.
    """
    text = os.fspath(path)
    if not text:
        raise InvalidArgument("timing_cache='' is empty; pass a file path such as ~/.cache/trtforge/timing.cache")
    if text.endswith(("/", os.sep)) or (os.altsep and text.endswith(os.altsep)):
        raise InvalidArgument(
            f"timing_cache={text!r} ends in a path separator; name a file, e.g. {text.rstrip('/' + os.sep)}/timing.cache"
        )
    resolved = Path(text).expanduser()
    if resolved.is_dir():
        raise InvalidArgument(f"timing_cache={text!r} is a directory; name a file inside it, e.g. {resolved / 'timing.cache'}")
    folder = resolved.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OSError(exc.errno, f"timing_cache folder {folder} cannot be created ({exc.strerror or exc}); "
                      "choose a writable location") from exc
    if not os.access(folder, os.W_OK | os.X_OK) or (resolved.exists() and not os.access(resolved, os.R_OK | os.W_OK)):
        raise NotPermitted(13, f"timing_cache {resolved} cannot be written (permission denied); choose a writable location")
    if not timing_cache_supported():  # said before the build (or its cache hit), once per process
        _say_ignored_once()
    return resolved


def timing_cache_supported() -> bool:
    """True when the builder really uses a timing cache (full TensorRT; TensorRT-RTX does not)."""
    info = trt.info()
    return info.timing_cache and not info.is_rtx


def _say_ignored_once() -> None:
    global _said_ignored
    if not _said_ignored:
        _said_ignored = True
        log.warning("%s is ignored: %s %s has no timing cache (its timing-cache calls are no-ops)",
                    spelled(cli="--timing-cache", python="timing_cache="),
                 trt.info().flavour, trt.info().version)


def _load(cfg: Any, data: bytes, path: Path) -> Any:
    """An ITimingCache from ``data``; a corrupt or foreign cache is logged and replaced by an empty one."""
    empty = cfg.create_timing_cache(b"")
    if not data:
        return empty
    try:
        cache = cfg.create_timing_cache(data)
    except (RuntimeError, TypeError, ValueError) as exc:
        log.warning("timing cache %s cannot be read (%s); replacing it with a fresh one", path, exc)
        return empty
    empty_bytes = bytes(empty.serialize())
    if cache is None or (not cache.queryKeys() and data != empty_bytes):
        log.warning("timing cache %s is corrupt or from another TensorRT version; replacing it with a fresh one",
                    path)
        return empty
    return cache


class TimingCacheSession:
    """Load → attach to an ``IBuilderConfig`` → build → merge and write back (see module docstring)."""

    def __init__(self, path: Path | None) -> None:
        self.path = Path(path) if path is not None else None
        self.active = self.path is not None and timing_cache_supported()
        self._cfg: Any = None
        self._cache: Any = None
        self.lock = FileLock(str(self.path) + ".lock", timeout=LOCK_TIMEOUT_S) if self.active else None

    def __enter__(self) -> TimingCacheSession:
        if self.path is not None and not self.active:
            _say_ignored_once()
        return self

    def __exit__(self, *exc: object) -> None:
        self._cfg = self._cache = None

    def _read(self) -> bytes:
        try:
            return self.path.read_bytes()
        except FileNotFoundError:
            return b""

    def attach(self, cfg: Any) -> None:
        """Load the cache from disk (under the lock) and hand it to the builder config."""
        if not self.active:
            return
        with self.lock:
            data = self._read()
        self._cfg = cfg
        self._cache = _load(cfg, data, self.path)
        cfg.set_timing_cache(self._cache, True)

    def save(self) -> int:
        """Merge this build's timings into the file on disk (under the lock); return the bytes written."""
        if not self.active or self._cache is None:
            return 0
        with self.lock:
            merged = _load(self._cfg, self._read(), self.path)
            merged.combine(self._cache, True)
            data = bytes(merged.serialize())
            atomic_write_bytes(self.path, data)
        log.debug("timing cache %s: %d bytes written", self.path, len(data))
        return len(data)
