"""The one error tree: user errors name the problem and the fix; anything else is our bug.

Polygraphy's split. A ``UserError`` (bad input, a missing file, an option that cannot work, a
machine that lacks something) prints as one line, with no traceback, in the CLI. Every other
exception is a bug in trtforge: the CLI prints its traceback and a line saying so.

Each user error also derives from the builtin a Python caller would expect (``ValueError``,
``FileNotFoundError``, ...), so ``except ValueError`` keeps working.

Example:
    >>> try:
    ...     raise InvalidArgument("batch=0: a batch needs at least 1 sample; pass batch=1")
    ... except UserError as exc:
    ...     print(exc)
    batch=0: a batch needs at least 1 sample; pass batch=1
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from contextvars import ContextVar

#: Terminal control sequences (colours, cursor moves) that libraries put into their messages.
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")


def plain(text: str) -> str:
    """``text`` without terminal colour codes, so a message reads the same in a log as on a terminal.

    Example:
        >>> plain("\x1b[31mConstraintViolationError\x1b[0m: size()[0] = 4")
        'ConstraintViolationError: size()[0] = 4'
    """
    return _ANSI.sub("", text)


#: Who reads the messages of this call: "python" (a caller of the API) or "cli" (``trtforge ...``).
#: Fix lines name the option as that reader writes it: ``--cache-dir DIR`` or ``cache_dir=``.
AUDIENCE: ContextVar[str] = ContextVar("trtforge_audience", default="python")


@contextlib.contextmanager
def cli_audience() -> Iterator[None]:
    """Messages raised inside name CLI flags (the ``trtforge`` command wraps every command in it)."""
    token = AUDIENCE.set("cli")
    try:
        yield
    finally:
        AUDIENCE.reset(token)


def spelled(cli: str, python: str) -> str:
    """The spelling of an option (or a whole fix) for the reader of this call.

    Example:
        >>> spelled(cli="--no-cache", python="cache=False")
        'cache=False'
        >>> with cli_audience():
        ...     spelled(cli="--no-cache", python="cache=False")
        '--no-cache'
    """
    return cli if AUDIENCE.get() == "cli" else python


class TrtforgeError(Exception):
    """Base of every exception trtforge raises on purpose."""


class UserError(TrtforgeError):
    """Bad input or environment: the message names the problem and the fix; one line in the CLI."""


class InternalError(TrtforgeError):
    """A broken promise inside trtforge (a bug): the CLI keeps the traceback."""


class InvalidArgument(UserError, ValueError):
    """An argument, option or input value that cannot work."""


class ConfigError(InvalidArgument):
    """An option that cannot work; raised before capture or build starts (``core.config`` checks)."""


class WrongType(UserError, TypeError):
    """An argument of a type trtforge cannot take."""


class MissingFile(UserError, FileNotFoundError):
    """A file or folder the caller named does not exist."""


class FileConflict(UserError, FileExistsError):
    """A file trtforge would overwrite but did not write (or a build that would replace another)."""


class NotPermitted(UserError, PermissionError):
    """Something refused for safety (unwritable folder, untrusted code, host code in an engine)."""


class NotAFolder(UserError, NotADirectoryError):
    """A path that should be a folder is a file."""


class MissingDependency(UserError, ImportError):
    """An optional package or a machine capability (a GPU, TensorRT) that this call needs."""


class Unsupported(UserError, RuntimeError):
    """A valid request this machine, flavour or route cannot carry out; the message says what can."""


class AccuracyBudgetMissed(Unsupported):
    """``strict_accuracy=True`` and the INT8 graph missed its error budget on the held-back samples."""


class Cancelled(KeyboardInterrupt):
    """The user interrupted the work (Ctrl-C); nothing half-written is left behind.

    A ``KeyboardInterrupt`` on purpose, not a ``TrtforgeError``: ``except Exception`` must not swallow it.
    """
