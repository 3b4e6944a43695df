"""TensorRT's log, caught: one recording logger for the builder and the runtime.

TensorRT keeps the FIRST logger a process hands it (builder or runtime) and ignores later ones
("the current new logger is ignored"). So every ``RecordingLogger`` sends a message to the same
place, whichever of them TensorRT calls:

- while a build runs (``active()``), to that build's recorder, which keeps errors and warnings for
  its own error message and logs them at DEBUG (the build's error names them once);
- otherwise (a runtime call, after the build is over), to Python ``logging`` at TensorRT's own level
  (errors as errors, warnings as warnings), and into ``recent()``, which the TensorRT route quotes
  when a call fails.

Example:
    >>> logger = RecordingLogger()
    >>> mark = mark_recent()
    >>> logger.trt_logger.log(trt.bindings().ILogger.Severity.ERROR, "Error Code 1: Cuda Runtime")
    >>> recent_errors(mark)
    ['Error Code 1: Cuda Runtime']
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import threading
from collections import deque
from collections.abc import Iterator
from types import ModuleType
from typing import Any

from trtforge.core import trt

log = logging.getLogger("trtforge.tensorrt")

#: TensorRT severities that are errors; the ones kept are these and WARNING.
ERROR_SEVERITIES: tuple[str, ...] = ("INTERNAL_ERROR", "ERROR")
LEVELS: dict[str, int] = {"INTERNAL_ERROR": logging.ERROR, "ERROR": logging.ERROR, "WARNING": logging.WARNING}

#: The recorders of the builds running now, innermost last.
_ACTIVE: list[RecordingLogger] = []
#: Messages logged outside a build: (sequence number, severity, message), the newest last.
_RECENT: deque[tuple[int, str, str]] = deque(maxlen=64)
_COUNTER = itertools.count(1)
_LOCK = threading.Lock()


def _severity_name(severity: object) -> str:
    name = getattr(severity, "name", None)
    return name if isinstance(name, str) else str(severity).rsplit(".", 1)[-1]


def forward(severity: str, msg: str) -> None:
    """A message outside any build: to ``logging`` at its own level, and into ``recent()``."""
    level = LEVELS.get(severity)
    if level is None:
        return
    with _LOCK:
        _RECENT.append((next(_COUNTER), severity, msg))
    log.log(level, "TensorRT %s: %s", severity.lower().replace("_", " "), msg)


def mark_recent() -> int:
    """A mark: ``recent_errors(mark)`` gives the errors logged after it."""
    with _LOCK:
        return _RECENT[-1][0] if _RECENT else 0


def recent_errors(mark: int = 0) -> list[str]:
    """TensorRT's errors logged outside a build since ``mark``, oldest first."""
    with _LOCK:
        return [m for n, s, m in _RECENT if n > mark and s in ERROR_SEVERITIES]


class RecordingLogger:
    """A TensorRT logger (an ``ILogger`` of ``bindings``, default: the installed ones) that keeps
    warnings and errors (see the module docstring for where a message goes)."""

    def __init__(self, bindings: ModuleType | None = None) -> None:
        mod = bindings if bindings is not None else trt.bindings()
        owner = self
        self.messages: list[tuple[str, str]] = []

        class _Logger(mod.ILogger):
            def __init__(self) -> None:
                mod.ILogger.__init__(self)

            def log(self, severity, msg):
                owner.dispatch(_severity_name(severity), msg)

        self.trt_logger = _Logger()

    def dispatch(self, severity: str, msg: str) -> None:
        """Where TensorRT's callback puts a message: the running build's recorder, else ``forward``."""
        target = _ACTIVE[-1] if _ACTIVE else None
        if target is None:
            forward(severity, msg)
        else:
            target.record(severity, msg)

    @contextlib.contextmanager
    def active(self) -> Iterator[RecordingLogger]:
        """Route every TensorRT log message to this recorder while the block runs."""
        _ACTIVE.append(self)
        try:
            yield self
        finally:
            _ACTIVE.remove(self)

    def record(self, severity: str, msg: str) -> None:
        if severity in LEVELS:
            self.messages.append((severity, msg))
            log.debug("TensorRT %s (during a build): %s", severity, msg)

    def errors(self) -> list[str]:
        return [m for s, m in self.messages if s in ERROR_SEVERITIES]


@functools.cache
def process_logger(bindings: ModuleType) -> Any:
    """One TensorRT logger per bindings module, alive for the whole process: TensorRT keeps the first
    logger it is handed and calls it later, so the runtime's must never be freed."""
    return RecordingLogger(bindings).trt_logger
