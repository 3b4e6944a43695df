"""The ``trtforge`` typer app and its error handling: user errors are one line, bugs keep their traceback.

Every command module imports only typer, rich and ``trtforge.core`` at the top; the compile stack,
torch and onnx load inside the command that needs them, so ``trtforge --help`` stays fast.

Exit codes: 0 done; 1 a failed check, an OS error (full disk, permission) or a bug in trtforge;
2 a user error (``trtforge.core.errors.UserError``: the line says what to change). Ctrl-C is a failure
too (exit 1, one ``error: interrupted (Ctrl-C); no file was left half-written`` line, whatever the stage): every write
is staged, so nothing is left half-written, and a build removes an output folder it made and left empty.

Example:
    >>> @app.command()
    ... @guarded
    ... def hello() -> None:
    ...     raise InvalidArgument("--name '': give a name, e.g. --name lite0")   # → "error: ..." and exit 2
"""

from __future__ import annotations

import errno
import functools
import logging
import signal
import sys
import threading
import traceback
from collections.abc import Callable
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from trtforge.core.errors import Cancelled, UserError, cli_audience, plain

app = typer.Typer(no_args_is_help=True, add_completion=False, help="PyTorch/ONNX → TensorRT engines, run fast.",
                  rich_markup_mode=None,
                  context_settings={"max_content_width": 80})
console = Console(width=None if Console().is_terminal else 160, emoji=False)
err_console = Console(stderr=True, emoji=False, highlight=False)

EXIT_FAILED, EXIT_USER_ERROR = 1, 2
#: Ctrl-C: a failure like any other (one line, exit 1), not the shell's 130: the promise is "exit 1 or 2".
EXIT_CANCELLED = EXIT_FAILED
#: The line for a Ctrl-C without a message of its own (true of every command: writes are staged).
INTERRUPTED = "interrupted (Ctrl-C); no file was left half-written"
TERMINATED = "terminated (SIGTERM); no file was left half-written and the temporary files are removed"
#: errno → what to do, after the OS's own message (nothing was written: every write is staged).
OS_ERROR_HINTS = {
    errno.ENOSPC: "; nothing was written. Free some space (or choose another --output-dir / --cache-dir) "
                  "and run the command again",
    errno.EDQUOT: "; nothing was written. Free some of your quota and run the command again",
}
#: click's UsageError (an unknown flag, a missing argument, a value of the wrong type), whether typer
#: vendors click or imports it: the base of ``typer.BadParameter`` of that name.
USAGE_ERROR: type[Exception] = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")
BUG_LINE = "this is a bug in trtforge, not in your input: please report it with the traceback above"


def one_line(message: str) -> str:
    """``message`` on one line: colour codes dropped, its lines joined with ``; ``.

    Example:
        >>> one_line("parser rejected m.onnx:\n  node 'u' (Unique): no importer\nRemove it.")
        "parser rejected m.onnx: node 'u' (Unique): no importer; Remove it."
    """
    lines = [line.strip() for line in plain(message).splitlines() if line.strip()]
    return "".join(line + ("" if i == len(lines) - 1 else " " if line.endswith(":") else "; ")
                   for i, line in enumerate(lines))


def say_error(message: str) -> None:
    """One ``error: ...`` line on stderr; the message is escaped, so ``[...]`` and ``:x:`` print as they are."""
    err_console.print(f"[bold red]error:[/] {escape(one_line(message))}", soft_wrap=True)


def say_warning(message: str) -> None:
    """One ``warning: ...`` line on stderr, escaped like ``say_error``."""
    err_console.print(f"[yellow]warning:[/] {escape(one_line(message))}", soft_wrap=True)


def interrupted_line(exc: KeyboardInterrupt) -> str:
    """The one line of a Ctrl-C, for ``say_error``: the same at every stage (a ``Cancelled`` build's own message is
    for Python callers), so scripts and docs/reliability.md can rely on it; SIGTERM's ``Terminated`` says its own.

    Example:
        >>> interrupted_line(KeyboardInterrupt())
        'interrupted (Ctrl-C); no file was left half-written'
        >>> interrupted_line(Cancelled("build of m cancelled by the user; nothing was written"))
        'interrupted (Ctrl-C); no file was left half-written'
    """
    if isinstance(exc, Terminated) or getattr(exc, "signum", None) == signal.SIGTERM:  # a build stopped by SIGTERM
        return TERMINATED
    return INTERRUPTED


def guarded(func: Callable[..., Any]) -> Callable[..., Any]:
    """Run a command: user errors → one line, exit 2; Ctrl-C and OS errors → one line, exit 1;
    anything else → the traceback and a line saying it is a trtforge bug, exit 1."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            with cli_audience():  # fix lines name CLI flags, not Python arguments
                return func(*args, **kwargs)
        except (typer.Exit, typer.Abort):
            raise
        except UserError as exc:
            say_error(str(exc))
            raise typer.Exit(EXIT_USER_ERROR) from exc
        except KeyboardInterrupt as exc:
            say_error(interrupted_line(exc))
            raise typer.Exit(EXIT_CANCELLED) from exc
        except OSError as exc:
            if exc.errno is None:
                raise _bug(exc) from exc
            say_error(str(exc) + OS_ERROR_HINTS.get(exc.errno, ""))
            raise typer.Exit(EXIT_FAILED) from exc
        except Exception as exc:  # noqa: BLE001 - anything else is our bug: say so, keep the traceback
            raise _bug(exc) from exc

    return wrapper


#: The most characters of an exception's message the bug line repeats (a library's message can hold a whole graph).
BUG_LINE_CHARS = 400


def bounded(message: str, limit: int = BUG_LINE_CHARS) -> str:
    """``message`` on one line, cut to ``limit`` characters; the cut says how much the traceback above keeps.

    Example:
        >>> bounded("ValueError: " + "x" * 1000, 20)
        'ValueError: xxxxxxxx … (992 more characters in the traceback above)'
    """
    line = one_line(message)
    return line if len(line) <= limit else f"{line[:limit]} … ({len(line) - limit} more characters in the traceback above)"


def _bug(exc: BaseException) -> typer.Exit:
    """Print ``exc``'s traceback and the bug line; the exit to raise."""
    err_console.print(escape("".join(traceback.format_exception(exc))), end="", soft_wrap=True)
    say_error(bounded(f"{type(exc).__name__}: {exc}"))
    err_console.print(f"[bold red]{escape(BUG_LINE)}[/]", soft_wrap=True)
    return typer.Exit(EXIT_FAILED)


class StderrHandler(logging.StreamHandler):
    """Log lines to whatever ``sys.stderr`` is now (test runners swap it), as ``warning: ...``."""

    def __init__(self, level: int) -> None:
        super().__init__()
        self.setLevel(level)
        self.setFormatter(logging.Formatter("%(levelname)s: %(message)s"))

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass

    def format(self, record: logging.LogRecord) -> str:
        return one_line(super().format(record).replace(record.levelname, record.levelname.lower(), 1))


@app.callback()
def verbosity(
    verbose: Annotated[int, typer.Option("-v", "--verbose", count=True, help="more log lines (-vv: debug)")] = 0,
    quiet: Annotated[bool, typer.Option("-q", "--quiet", help="errors only, no warnings")] = False,
) -> None:
    """PyTorch/ONNX → TensorRT engines, run fast."""
    level = logging.ERROR if quiet else {0: logging.WARNING, 1: logging.INFO}.get(verbose, logging.DEBUG)
    logger = logging.getLogger("trtforge")
    logger.handlers[:] = [StderrHandler(level)]
    if verbose:
        logger.setLevel(level)


class Terminated(Cancelled):
    """SIGTERM (docker stop, systemd, ``timeout``): the same clean-up as Ctrl-C, then one line and exit 1."""


def _on_sigterm(signum: int, _frame: Any) -> None:
    raise Terminated(TERMINATED)


def terminate_like_interrupt() -> None:
    """SIGTERM raises ``Terminated`` (a ``KeyboardInterrupt``) in the main thread, so every ``finally`` and
    ExitStack runs as it does for Ctrl-C; Python's default would end the process on the spot and leave
    ``$TMPDIR/trtforge-*`` folders behind. A SIGTERM that the parent set to be ignored stays ignored."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _on_sigterm)


@functools.cache
def click_command() -> Any:
    """``app`` as a click command, made once per process: typer makes it anew on every ``app(...)`` call (~25 ms
    of signature reading), which a process that runs many commands (tests, the matrix) pays each time. Every
    command is wrapped in ``guarded``, so typer's own exception hook has nothing left to format."""
    return typer.main.get_command(app)


def main(argv: list[str] | None = None) -> None:
    """The ``trtforge`` command: a usage error (unknown flag, bad value) is one line too, exit 2."""
    terminate_like_interrupt()
    try:
        code = click_command().main(args=argv, prog_name="trtforge", standalone_mode=False)
    except USAGE_ERROR as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # bare ``trtforge`` / ``trtforge cache``: the help
            print(exc.format_message())
            sys.exit(0)
        where = f"trtforge {exc.ctx.command_path.partition(' ')[2]}".strip() if exc.ctx else "trtforge"
        say_error(f"{exc.format_message()}; see '{where} --help'")
        sys.exit(EXIT_USER_ERROR)
    except typer.Abort:  # Ctrl-C while click itself was reading input
        say_error(INTERRUPTED)
        sys.exit(EXIT_CANCELLED)
    sys.exit(code or 0)
