"""Run the ``trtforge`` command inside the test process, as the console script would, and capture it.

A CLI process pays 3 to 7 CPU s of start-up (torch, onnx_ir, TensorRT) before it does anything; in process
that is paid once per test run. ``run`` calls ``trtforge.cli.main`` (the console script's entry point, so
usage errors, exit codes and the one ``error:`` line are the real ones) with the environment, working
folder and ``$TMPDIR`` a subprocess would have had, and puts them all back afterwards.

Keep a real subprocess for what only a process shows: signals, the console script's exit status, start-up
imports and time (tests/hardening/test_promises.py, tests/cli/test_cli.py).

Example:
    >>> done = run(["build", "tiny.onnx", "--batch", "a:b:c"], env={"TRTFORGE_CACHE_DIR": "/tmp/c"})
    >>> done.returncode, done.stderr.splitlines()[0][:12]
    (2, 'error: batch')
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path


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
    """The working folder, ``tempfile``'s cached ``$TMPDIR`` and the SIGTERM handler, restored afterwards
    (``main`` installs its SIGTERM handler in the main thread, as the console script does)."""
    sigterm = signal.getsignal(signal.SIGTERM)
    here = Path.cwd()
    tempfile.tempdir = None  # re-read $TMPDIR, as a new process would
    try:
        if cwd is not None:
            os.chdir(cwd)
        yield
    finally:
        os.chdir(here)
        tempfile.tempdir = None
        signal.signal(signal.SIGTERM, sigterm)


def exit_status(code: object) -> int:
    """The status ``sys.exit(code)`` gives a process: None is 0, an int is itself, anything else is 1."""
    if code is None:
        return 0
    return code if isinstance(code, int) else 1


def run(argv: Sequence[object], *, env: Mapping[str, str | None] | None = None, cwd: Path | None = None) -> Done:
    """``trtforge *argv`` in this process: ``env`` on top of ``os.environ``, ``cwd`` the working folder."""
    from trtforge.cli import main

    out, err = io.StringIO(), io.StringIO()
    code: object = None
    with environment({"COLUMNS": "200", **(env or {})}), _process_state(cwd), \
            contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main([str(a) for a in argv])
        except SystemExit as exc:
            code = exc.code
    return Done(exit_status(code), out.getvalue(), err.getvalue())
