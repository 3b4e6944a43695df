"""Atomic file writes: temp file in the same folder, fsync, then ``os.replace``.

Files get the mode a plain ``open(path, "w")`` would give (``0o666`` less the umask) unless
``mode`` says otherwise, so every file of one build has the same permission bits.

``atomic_write_all`` also takes a ``Path`` instead of bytes: a finished file that is never changed in
place (an engine-cache blob). It is hard-linked into place when it can be (same file system, same
permission bits): a cache hit then writes no bytes. Elsewhere it is copied.

Example:
    >>> atomic_write_bytes(Path("out/model.engine"), plan)
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import secrets
import shutil
import signal
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO


@functools.cache
def default_mode() -> int:
    """``0o666`` less the process umask: what ``open()`` would create (``mkstemp`` gives 0600).

    Read once: ``os.umask`` can only be read by setting it, so it is not read on every write.
    """
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


@contextlib.contextmanager
def atomic_writer(path: Path, mode: int | None = None) -> Iterator[BinaryIO]:
    """Yield a binary file; on success it replaces ``path`` atomically, on error it vanishes."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, default_mode() if mode is None else mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_bytes(path: Path, data: bytes, mode: int | None = None) -> None:
    """Write ``data`` to ``path`` atomically (readers see the old file or the new, never half)."""
    with atomic_writer(path, mode) as handle:
        handle.write(data)


#: A staged file's content: bytes, or a finished file to hard-link (or copy) — see the module docstring.
Payload = bytes | Path
#: ``os.link`` errors that mean "no link here" (another file system, links not supported, too many): copy.
NO_LINK = {errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EACCES}


@contextlib.contextmanager
def _staged(path: Path, data: Payload, mode: int | None) -> Iterator[str]:
    """A finished temp file beside ``path`` holding ``data``; removed on exit unless it was moved."""
    want = default_mode() if mode is None else mode
    if isinstance(data, Path):
        tmp = str(path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp")
        try:
            _link_or_copy(data, tmp, want)
            yield tmp
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        return
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, want)
        yield tmp
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def _link_or_copy(source: Path, tmp: str, mode: int) -> None:
    """``tmp`` as a hard link to ``source`` (its bytes are already on disk), else a fsynced copy."""
    if os.stat(source).st_mode & 0o7777 == mode:  # a link shares the permission bits: only when they are the ones wanted
        try:
            os.link(source, tmp)
            return
        except OSError as exc:
            if exc.errno not in NO_LINK:
                raise
    shutil.copyfile(source, tmp)
    with open(tmp, "rb+") as handle:
        os.fsync(handle.fileno())
    os.chmod(tmp, mode)


def atomic_write_all(files: list[tuple[Path, Payload, int | None]]) -> None:
    """Write every ``(path, data, mode)`` to a temp file first, then ``os.replace`` them in order.

    A full disk or an interrupt while writing leaves none of the new files (the old ones stay);
    the moves themselves need no space. Put the file that marks a set complete (a sidecar) last.
    ``data`` may be a ``Path`` to a finished file: it is hard-linked (or copied), not read.

    Example:
        >>> atomic_write_all([(Path("out/m.engine"), plan, None), (Path("out/m.json"), text, None)])
    """
    with contextlib.ExitStack() as stack:
        staged = [(stack.enter_context(_staged(Path(path), data, mode)), Path(path)) for path, data, mode in files]
        with signals_deferred():  # Ctrl-C between two moves would leave a set half-replaced
            for tmp, path in staged:
                os.replace(tmp, path)


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold SIGINT and SIGTERM back for a few fast steps (in the main thread); they arrive right after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held = {signal.SIGINT, signal.SIGTERM}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


@contextlib.contextmanager
def folder_lock(directory: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``directory`` itself (``flock`` on its descriptor; no lock file is left).

    Two builds writing one name into one folder take turns, so the second sees what the first wrote.

    Example:
        >>> with folder_lock(Path("out")):
        ...     atomic_write_all(files)
    """
    import fcntl

    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock
