"""What libtensorrt_rtx prints itself, past TensorRT's ``ILogger``, goes to trtforge's log instead.

Myelin (inside libtensorrt_rtx) writes some lines straight to the process's stdout and stderr: the
FP16 ``WARNING: in op node_max, operand node_alpha payload type requires precision-lose casting`` of a
Clip without bounds (stdout), or ``Internal Error: MyelinCheckException ...`` of an attention it cannot
decompose (stderr). While TensorRT parses and builds, file descriptors 1 and 2 point at temporary
files; Python's own ``sys.stdout``/``sys.stderr`` keep writing to the terminal (the progress bar, log
handlers created later), and each captured line is logged at debug level.

Example:
    >>> with native_output_to_log():
    ...     plan = builder.build_serialized_network(network, config)
"""

from __future__ import annotations

import contextlib
import ctypes
import io
import logging
import os
import sys
import tempfile
import threading
from collections.abc import Iterator

log = logging.getLogger(__name__)

#: (file descriptor, the ``sys`` stream that writes to it, the standard redirector for that stream).
STREAMS: tuple[tuple[int, str, type[contextlib.AbstractContextManager]], ...] = (
    (1, "stdout", contextlib.redirect_stdout),
    (2, "stderr", contextlib.redirect_stderr),
)


def _flush_c_streams() -> None:
    """Flush C stdio buffers (Myelin's printf to a pipe or file is buffered until then)."""
    ctypes.CDLL(None).fflush(None)


@contextlib.contextmanager
def _captured_fd(fd: int, stream_name: str, redirect, lines: list[str]) -> Iterator[None]:
    """Point ``fd`` at a temporary file while the block runs and append what was written there to ``lines``;
    Python's ``sys.<stream_name>`` writes to the original destination meanwhile."""
    stream = getattr(sys, stream_name)
    if stream is not None:
        stream.flush()
    _flush_c_streams()
    saved = os.dup(fd)
    with contextlib.ExitStack() as stack:
        stack.callback(os.close, saved)
        sink = stack.enter_context(tempfile.TemporaryFile())
        original = stack.enter_context(io.TextIOWrapper(os.fdopen(os.dup(saved), "wb"), write_through=True))
        os.dup2(sink.fileno(), fd)
        try:
            with redirect(original):
                yield
        finally:
            _flush_c_streams()
            os.dup2(saved, fd)
            sink.seek(0)
            lines.extend(line for line in sink.read().decode(errors="replace").splitlines() if line.strip())


class _Capture:
    """The process's one capture: file descriptors are process-wide, so builds running in several threads
    share it; the first to enter points fds 1 and 2 at the files, the last to leave restores them."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.depth = 0
        self.stack: contextlib.ExitStack | None = None
        self.lines: list[str] = []

    def enter(self) -> list[str]:
        with self.lock:
            if self.depth == 0:
                self.lines = []
                with contextlib.ExitStack() as stack:
                    for fd, name, redirect in STREAMS:
                        stack.enter_context(_captured_fd(fd, name, redirect, self.lines))
                    self.stack = stack.pop_all()
            self.depth += 1
            return self.lines

    def leave(self) -> list[str]:
        """The captured lines when this was the last user (the fds are restored), else []."""
        with self.lock:
            self.depth -= 1
            if self.depth or self.stack is None:
                return []
            stack, self.stack = self.stack, None
            stack.close()
            return self.lines


_CAPTURE = _Capture()


@contextlib.contextmanager
def native_output_to_log(level: int = logging.DEBUG) -> Iterator[list[str]]:
    """Capture what native code writes to stdout and stderr while the block runs; log each line at
    ``level`` when the last concurrent block ends (the list of lines is yielded, filled then)."""
    lines = _CAPTURE.enter()
    try:
        yield lines
    finally:
        for line in _CAPTURE.leave():
            log.log(level, "TensorRT printed: %s", line)
