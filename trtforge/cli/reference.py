"""The CLI reference page, generated from the typer app itself: every command, argument and option.

The documentation site builds ``reference-cli.md`` from this at build time (``docs/hooks.py``), so a
new option appears there without anyone editing a page; ``tests/docs/test_reference.py`` compares the
page with the app's own parameters.

Example:
    >>> page = cli_reference()
    >>> "## trtforge build" in page and "`--precision`" in page
    True
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import typer

HEADER = """# CLI reference

Generated from the `trtforge` command itself when the site is built (`trtforge/cli/reference.py`);
`trtforge COMMAND --help` prints the same. Exit codes: 0 done, 1 a failed check, an OS error or a bug,
2 a user error (one line naming the fix): [reliability.md](reliability.md).
"""


def click_command(app: typer.Typer | None = None) -> Any:
    """The click command (typer's own click) behind the typer ``app`` (default: the ``trtforge`` app with every command)."""
    if app is None:
        from trtforge.cli import app as trtforge_app

        app = trtforge_app
    return typer.main.get_command(app)


def walk(command: Any, path: str = "trtforge") -> Iterator[tuple[str, Any]]:
    """``(command path, command)`` for ``command`` and every subcommand, depth first, names sorted."""
    yield path, command
    if hasattr(command, "commands"):
        for name in sorted(command.commands):
            sub = command.commands[name]
            if not sub.hidden:
                yield from walk(sub, f"{path} {name}")


def _cell(text: str | None) -> str:
    return " ".join((text or "").split()).replace("|", "\\|")


def _is_option(param: Any) -> bool:
    return param.param_type_name == "option"


def _default(param: Any) -> str:
    default = param.default
    if (default is None or default == () or default == [] or callable(default) or param.required
            or (_is_option(param) and param.is_flag and not param.secondary_opts and not default)):
        return ""
    return f"`{default}`"


def _names(param: Any) -> str:
    if not _is_option(param):
        return f"`{param.name.upper()}`"
    return ", ".join(f"`{o}`" for o in [*param.opts, *param.secondary_opts])


def _kind(param: Any) -> str:
    if _is_option(param) and param.count:
        return "count (repeatable)"
    if _is_option(param) and param.is_flag:
        return "flag"
    choices = getattr(param.type, "choices", None) if hasattr(param, "type") else None
    if choices:
        return " \\| ".join(str(c) for c in choices)
    annotation = param.type_descriptor.annotation
    return getattr(annotation, "__name__", str(annotation)) if not str(annotation).startswith("list[") else (
        f"{str(annotation)[5:-1].rsplit('.', 1)[-1]}, repeatable")


def params_of(command: Any) -> list[Any]:
    """The arguments and options a page lists for ``command`` (not ``--help``, not hidden ones)."""
    return [p for p in command.params if not getattr(p, "hidden", False) and p.name != "help"]


def command_section(path: str, command: Any) -> str:
    """One command's section: its help text and a table of its arguments and options."""
    level = "#" * min(2 + path.count(" ") - 1, 4) if " " in path else "##"
    lines = [f"{level} {path}", ""]
    if command.help:
        lines += [command.help.strip(), ""]
    params = params_of(command)
    if params:
        lines += ["| argument / option | type | default | what it does |", "|---|---|---|---|"]
        for p in params:
            help_text = getattr(p, "help", None) or ("required" if p.required else "")
            lines.append(f"| {_names(p)} | {_cell(_kind(p))} | {_cell(_default(p))} | {_cell(help_text)} |")
        lines.append("")
    if hasattr(command, "commands"):
        subs = [name for name, sub in sorted(command.commands.items()) if not sub.hidden]
        lines += ["Commands: " + ", ".join(f"`{name}`" for name in subs), ""]
    return "\n".join(lines)


def cli_reference(app: typer.Typer | None = None) -> str:
    """The whole reference page as Markdown."""
    root = click_command(app)
    return "\n".join([HEADER, *(command_section(path, cmd) for path, cmd in walk(root))])


if __name__ == "__main__":
    print(cli_reference())
