"""Declared options: a config dataclass field carries its help text, what it changes (engine, graph or
output) and its CLI flag, so the API, the CLI and the cache key are derived from one declaration.

``trtforge.core.config`` declares its options with these and re-exports them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

#: What an option changes. ENGINE: the engine's bytes for a given graph (the engine key reads it).
#: GRAPH: the processed graph (the engine key hashes the graph; the request key reads the option).
#: OUTPUT: neither (where files go, what is printed, caches that only save time).
ENGINE, GRAPH, OUTPUT = "engine", "graph", "output"


#: A ``CliFlag.default`` that means "the field's own default".
FIELD_DEFAULT: Any = type("FieldDefault", (), {"__repr__": lambda self: "FIELD_DEFAULT"})()


@dataclass(frozen=True)
class CliFlag:
    """How ``trtforge build`` spells one option: its type there, flag names and conversion."""

    type: Any
    #: The CLI default when it differs from the field's (e.g. ``"1"`` for the batch).
    default: Any = FIELD_DEFAULT
    #: Flag names (``("-o", "--output-dir")``); empty: typer derives them from ``name``.
    decls: tuple[str, ...] = ()
    #: The command's parameter name when it differs from the field's (``opt_level``).
    name: str | None = None
    #: CLI value → field value (``--workspace-mb`` → bytes).
    to_field: Callable[[Any], Any] | None = None
    help: str | None = None


@dataclass(frozen=True)
class Option:
    """One option's metadata: help text, what it changes, and its CLI flag (None: Python only)."""

    help: str
    affects: str
    cli: CliFlag | None = None


def option(default: Any = MISSING, *, help: str, affects: str, cli: CliFlag | None = None,  # noqa: A002
           factory: Callable[[], Any] | None = None) -> Any:
    """A dataclass field carrying its ``Option`` metadata."""
    meta = {"option": Option(help, affects, cli)}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


def options_of(cls: type) -> Iterator[tuple[str, Option]]:
    """``(field name, Option)`` for every option of a config class, in declaration order."""
    for f in fields(cls):
        yield f.name, f.metadata["option"]


def cli_default(cls: type, name: str) -> Any:
    """The CLI default of field ``name``: the flag's own, else the field's."""
    f = next(f for f in fields(cls) if f.name == name)
    flag = f.metadata["option"].cli
    if flag.default is not FIELD_DEFAULT:
        return flag.default
    return f.default if f.default is not MISSING else f.default_factory()
