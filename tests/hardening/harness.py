"""Drive the trtforge CLI as a user would, and check what it leaves behind.

``run_cli`` runs ``python -m trtforge.cli ARGS`` with this checkout on ``PYTHONPATH`` and its own engine
cache; ``run_cli_in_process`` runs the same command in the test process (tests/support/cli_in_process.py:
no start-up paid; main thread only), for every test whose point is not the process itself. ``sigint_at``
names a function ("module:qualname"): the command then runs under ``sigint_at.py``, which sends the process
a real SIGINT when that function is first entered (a profiler hook in the test harness; production code is
untouched).

Example:
    >>> proc = run_cli(["build", "tiny.onnx", "--batch", "a:b:c"], cache_dir=tmp / "cache")
    >>> proc.returncode, error_lines(proc.stderr)
    (2, ["error: batch 'a:b:c': write N or min:opt:max with integers, e.g. 1:8:32"])
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import cli_in_process

ROOT = Path(__file__).resolve().parents[2]
SIGINT_AT = Path(__file__).with_name("sigint_at.py")
#: Ctrl-C's exit code: a failure like any other (the promise is "one line, exit 1 or 2"), not the shell's 130.
EXIT_CANCELLED = 1


def cli_env(cache_dir: Path, tmpdir: Path | None = None, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The command's environment: ``base`` (default: this process's, read now) with this checkout, its cache."""
    env = dict(os.environ if base is None else base)
    env.update({"PYTHONPATH": str(ROOT), "TRTFORGE_CACHE_DIR": str(cache_dir), "COLUMNS": "200",
                "PYTHONWARNINGS": "ignore::DeprecationWarning"})
    if tmpdir is not None:  # where the command's temporary folders go, so a leftover one shows
        env["TMPDIR"] = str(tmpdir)
    return env


def run_cli(argv: Sequence[str], *, cache_dir: Path, cwd: Path | None = None, sigint_at: str | None = None,
            timeout: float = 300, tmpdir: Path | None = None,
            base_env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess:
    """``python -m trtforge.cli *argv`` (or under ``sigint_at.py``), its output captured as text.

    ``base_env``: the environment to start from instead of ``os.environ`` (a thread that starts commands while
    the main thread runs others in process, with its own variables set, passes a copy taken beforehand)."""
    head = [sys.executable, str(SIGINT_AT), sigint_at] if sigint_at else [sys.executable, "-m", "trtforge.cli"]
    return subprocess.run([*head, *map(str, argv)], capture_output=True, text=True, timeout=timeout,
                          env=cli_env(cache_dir, tmpdir, base_env), cwd=cwd or ROOT, check=False)


def run_cli_in_process(argv: Sequence[object], *, cache_dir: Path, cwd: Path | None = None,
                       tmpdir: Path | None = None) -> cli_in_process.Done:
    """``trtforge *argv`` in this process, with what ``run_cli`` gives a process: its engine cache, ``COLUMNS``,
    the working folder, ``$TMPDIR`` (so a temporary folder left behind shows)."""
    env = {"TRTFORGE_CACHE_DIR": str(cache_dir)}
    if tmpdir is not None:
        env["TMPDIR"] = str(tmpdir)
    return cli_in_process.run(argv, env=env, cwd=cwd or ROOT)


def error_lines(stderr: str) -> list[str]:
    """The non-empty lines on stderr."""
    return [line for line in stderr.splitlines() if line.strip()]


def snapshot(folder: Path, skip: Sequence[str] = ()) -> dict[str, str]:
    """Every file under ``folder`` (relative path → sha256), so a run that must change nothing can be checked."""
    found = {}
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if any(rel == s or rel.startswith(s + "/") for s in skip):
            continue
        if path.is_file() and not path.is_symlink():
            found[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


@contextlib.contextmanager
def small_tmpfs(mountpoint: Path, size: str = "2m") -> Iterator[Path]:
    """A size-limited tmpfs at ``mountpoint`` (root only); unmounted afterwards."""
    mountpoint.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mountpoint)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise OSError(f"cannot mount a tmpfs at {mountpoint}: {done.stderr.strip()}")
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", "-l", str(mountpoint)], capture_output=True, check=False)


def can_mount_tmpfs(where: Path) -> bool:
    try:
        with small_tmpfs(where / "probe", "64k"):
            return True
    except OSError:
        return False


def fill(folder: Path, leave_bytes: int = 64 * 1024) -> Path:
    """Fill the file system of ``folder`` up to ``leave_bytes`` free; returns the filler file (delete it to free)."""
    filler = folder / "filler.bin"
    free = os.statvfs(folder).f_bavail * os.statvfs(folder).f_frsize
    filler.write_bytes(b"\0" * max(free - leave_bytes, 0))
    return filler
