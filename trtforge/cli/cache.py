"""``trtforge cache ls | prune | clear``: the engine cache.

Example:
    $ trtforge cache ls
    $ trtforge cache prune --max-mb 2000 --older-than-days 30
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from trtforge.cli.app import app, console, guarded
from trtforge.core.errors import InvalidArgument

cache_app = typer.Typer(no_args_is_help=True, help="The engine cache: ls | prune | clear.")
app.add_typer(cache_app, name="cache")
CacheDirOption = Annotated[Path | None, typer.Option("--cache-dir", help="default: $TRTFORGE_CACHE_DIR or "
                                                     "~/.cache/trtforge/engines")]


def megabytes(size: int) -> str:
    """A byte count in MB (10^6), the one unit ``cache ls`` and ``cache prune`` use.

    Example:
        >>> megabytes(14_900_000), megabytes(20 * 2**30)
        ('14.9 MB', '21474.8 MB')
    """
    return f"{size / 1e6:.1f} MB"


@cache_app.command("ls")
@guarded
def cache_ls(cache_dir: CacheDirOption = None) -> None:
    """List entries: key, model, precision, targets, size and last use (most recent first)."""
    import datetime as dt

    from trtforge.cache.engine_cache import EngineCache

    cache = EngineCache(cache_dir)
    entries = cache.entries()
    table = Table(title=escape(f"engine cache {cache.directory}  ({megabytes(sum(e.size for e in entries))} of "
                               f"{megabytes(cache.max_bytes)} limit)"))
    for col in ("key", "model", "precision", "targets", "MB", "last use"):
        table.add_column(col)
    for e in entries:
        when = dt.datetime.fromtimestamp(e.last_use).isoformat(sep=" ", timespec="seconds")
        table.add_row(e.key[:16], escape(e.model), escape(e.precision), escape(e.targets), f"{e.size / 1e6:.2f}", when)
    console.print(table)


@cache_app.command("prune")
@guarded
def cache_prune(
    cache_dir: CacheDirOption = None,
    max_mb: Annotated[float | None, typer.Option(help="evict least recently used entries down to this size")] = None,
    older_than_days: Annotated[float | None, typer.Option(help="remove entries unused for this many days")] = None,
) -> None:
    """Remove old entries and evict down to the size limit; tidy half-written leftovers."""
    from trtforge.cache.engine_cache import EngineCache

    for flag, value in (("--max-mb", max_mb), ("--older-than-days", older_than_days)):
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise InvalidArgument(f"{flag} {value:g}: give 0 or more, a finite number (leave {flag} out for no limit)")
    cache = EngineCache(cache_dir)
    removed = cache.prune(max_bytes=int(max_mb * 1e6) if max_mb is not None else None,
                          older_than_s=older_than_days * 86400 if older_than_days is not None else None)
    console.print(f"pruned {len(removed)} entr{'y' if len(removed) == 1 else 'ies'} "
                  f"({megabytes(sum(e.size for e in removed))}) from {escape(str(cache.directory))}")


@cache_app.command("clear")
@guarded
def cache_clear(cache_dir: CacheDirOption = None) -> None:
    """Remove every entry."""
    from trtforge.cache.engine_cache import EngineCache

    cache = EngineCache(cache_dir)
    console.print(f"cleared {cache.clear()} entries from {escape(str(cache.directory))}")
