"""Run the ``trtforge`` command inside the test process, as the console script would, and capture it.

A CLI process pays 3 to 7 CPU s of start-up (torch, onnx_ir, TensorRT) before it does anything; in process
that is paid once per test run. ``run`` calls ``trtforge.cli.main`` (the console script's entry point, so
usage errors, exit codes and the one ``error:`` line are the real ones) with what a fresh process would have
had, and puts it all back afterwards:

- the environment (``env`` on top of ``os.environ``, ``COLUMNS=200``), the working folder, ``tempfile``'s
  cached ``$TMPDIR`` (re-read from ``env``, so a per-command ``TMPDIR`` works), ``sys.path``;
- the SIGTERM handler ``main`` installs, and the ``trtforge`` logger's handlers and level (``-v``/``-q``
  set them; a second command in one process would otherwise inherit the first one's verbosity);
- warnings as a fresh interpreter under ``PYTHONWARNINGS=ignore::DeprecationWarning`` shows them, on the
  captured stderr (pytest would otherwise record them, and a stray warning line would go unseen).

``run`` must be called from the main thread (signal handlers can only be set there, and the state above is
the process's): while it runs, no other thread may read ``os.environ`` or the working folder and expect the
test process's own (give a subprocess started meanwhile an ``env`` copied beforehand).

Keep a real subprocess for what only a process shows: signals, the console script's exit status, start-up
imports and time, variables read at start-up, concurrent processes (tests/hardening/test_promises.py,
tests/cli/test_cli.py).

Example:
    >>> done = run(["build", "tiny.onnx", "--batch", "a:b:c"], env={"TRTFORGE_CACHE_DIR": "/tmp/c"})
    >>> done.returncode, done.stderr.splitlines()[0][:12]
    (2, 'error: batch')
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import signal
import sys
import tempfile
import threading
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

#: What a fresh interpreter ignores (its default filters), DeprecationWarning also by the subprocess
#: harness's PYTHONWARNINGS; every other warning is shown once per place, as Python's "default" action.
IGNORED_WARNINGS = (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning)


@dataclass(frozen=True)
class Done:
    """What a finished command left: its exit status and what it printed (like ``CompletedProcess``)."""

    returncode: int
    stdout: str
    stderr: str


@contextlib.contextmanager
def environment(env: Mapping[str, str | None]) -> Iterator[None]:
    """``os.environ`` updated by ``env`` (None removes a variable), restored on the way out."""
    saved = {name: os.environ.get(name) for name in env}
    try:
        for name, value in env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = str(value)
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextlib.contextmanager
def _process_state(cwd: Path | None) -> Iterator[None]:
    """The working folder, ``tempfile``'s cached ``$TMPDIR``, ``sys.path``, the SIGTERM handler and the
    ``trtforge`` logger, restored afterwards (``main`` installs its SIGTERM handler in the main thread, as
    the console script does; its ``-v``/``-q`` callback replaces the logger's handlers)."""
    sigterm = signal.getsignal(signal.SIGTERM)
    here, tempdir, path = Path.cwd(), tempfile.tempdir, list(sys.path)
    logger = logging.getLogger("trtforge")
    handlers, level, propagate = list(logger.handlers), logger.level, logger.propagate
    tempfile.tempdir = None  # re-read $TMPDIR, as a new process would
    try:
        if cwd is not None:
            os.chdir(cwd)
        yield
    finally:
        os.chdir(here)
        tempfile.tempdir = tempdir
        sys.path[:] = path
        logger.handlers[:] = handlers
        logger.setLevel(level)
        logger.propagate = propagate
        signal.signal(signal.SIGTERM, sigterm)


@contextlib.contextmanager
def _warnings_on_stderr() -> Iterator[None]:
    """Warnings under a fresh interpreter's filters, printed on ``sys.stderr`` (the captured one) as they come."""

    def show(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ANN001 - warnings' protocol
        sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))

    with warnings.catch_warnings():  # restores the filters and showwarning (pytest's recorder) afterwards
        warnings.resetwarnings()
        warnings.simplefilter("default")
        for category in IGNORED_WARNINGS:
            warnings.simplefilter("ignore", category)
        warnings.showwarning = show
        yield


def exit_status(code: object) -> int:
    """The status ``sys.exit(code)`` gives a process: None is 0, an int is itself, anything else is 1."""
    if code is None:
        return 0
    return code if isinstance(code, int) else 1


def run(argv: Sequence[object], *, env: Mapping[str, str | None] | None = None, cwd: Path | None = None) -> Done:
    """``trtforge *argv`` in this process: ``env`` on top of ``os.environ``, ``cwd`` the working folder."""
    from trtforge.cli import main

    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("cli_in_process.run changes process-wide state (environment, working folder, signal "
                           "handlers): call it from the main thread, one command at a time")
    out, err = io.StringIO(), io.StringIO()
    code: object = None
    with environment({"COLUMNS": "200", **(env or {})}), _process_state(cwd), \
            contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), _warnings_on_stderr():
        try:
            main([str(a) for a in argv])
        except SystemExit as exc:
            code = exc.code
    return Done(exit_status(code), out.getvalue(), err.getvalue())
