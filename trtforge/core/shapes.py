"""``CompileConfig.shapes``: ``--shapes NAME:MIN:OPT:MAX`` parsed, the field normalised and checked against ``batch``.

Example:
    >>> parse_shapes(["x:1x3x32x32:1x3x640x640:1x3x1280x1280"])[0][1][1]
    (1, 3, 640, 640)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trtforge.core.batch import DEFAULT_BATCH, BatchProfile
from trtforge.core.errors import ConfigError


def parse_shapes(specs: list[str] | None) -> tuple[tuple[str, tuple[tuple[int, ...], ...]], ...]:
    """``--shapes NAME:MIN:OPT:MAX`` (dims joined by ``x``), repeatable → the ``shapes`` field.

    Example:
        >>> parse_shapes(["x:1x3x32x32:1x3x640x640:1x3x1280x1280"])[0][1][1]
        (1, 3, 640, 640)
    """
    out = []
    for spec in specs or ():
        parts = spec.rsplit(":", 3)
        if len(parts) != 4 or not parts[0]:
            raise ConfigError(f"--shapes {spec!r}: write NAME:MIN:OPT:MAX with dims joined by x, "
                              "e.g. x:1x3x32x32:1x3x640x640:1x3x1280x1280")
        try:
            triple = tuple(tuple(int(d) for d in shape.split("x")) for shape in parts[1:])
        except ValueError as exc:
            raise ConfigError(f"--shapes {spec!r}: dims must be integers joined by x, e.g. 1x3x640x640") from exc
        out.append((parts[0], triple))
    return tuple(out)


def normalise_shapes(shapes: Any) -> tuple[tuple[str, tuple[tuple[int, ...], ...]], ...]:
    """``{name: (min, opt, max)}`` (or its normalised tuple form) → sorted nested tuples, checked:
    three shapes of one rank, every dim at least 1, min <= opt <= max per dim, each input once."""
    items = list(shapes.items() if isinstance(shapes, Mapping) else (shapes or ()))
    try:
        norm = tuple(sorted((str(name), tuple(tuple(int(d) for d in s) for s in triple)) for name, triple in items))
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"shapes={shapes!r}: give {{input: (min_shape, opt_shape, max_shape)}} with integer "
                          "dims, e.g. {'x': ((1, 3, 32, 32), (1, 3, 640, 640), (1, 3, 1280, 1280))}") from exc
    names = [name for name, _ in norm]
    if len(set(names)) != len(names):
        raise ConfigError(f"shapes names an input twice ({sorted(n for n in set(names) if names.count(n) > 1)}); "
                          "give each input one (min, opt, max)")
    for name, triple in norm:
        if len(triple) != 3:
            raise ConfigError(f"shapes[{name!r}] needs (min, opt, max) shapes, got {len(triple)}")
        lo, mid, hi = triple
        if not len(lo) == len(mid) == len(hi):
            raise ConfigError(f"shapes[{name!r}]: min, opt and max have different ranks {[len(s) for s in triple]}")
        if any(d < 1 for s in triple for d in s):
            raise ConfigError(f"shapes[{name!r}] = {triple}: every dim must be at least 1")
        if not all(a <= b <= c for a, b, c in zip(lo, mid, hi, strict=True)):
            raise ConfigError(f"shapes[{name!r}] = {triple}: needs min <= opt <= max in every dim")
    return norm


def check_batch_and_shapes(batch: tuple[BatchProfile, ...] | None, shapes: tuple) -> None:
    """Refuse a non-default ``batch`` that ``shapes`` would silently override (its dim 0 differs)."""
    if not shapes or batch is None or batch == DEFAULT_BATCH:
        return
    for name, (lo, mid, hi) in shapes:
        for profile in batch:
            if (lo[:1], mid[:1], hi[:1]) != ((profile.min,), (profile.opt,), (profile.max,)):
                raise ConfigError(
                    f"batch={profile} and shapes[{name!r}] (batch dims {lo[:1]}, {mid[:1]}, {hi[:1]}) disagree: "
                    "shapes sets the whole shape of that input. Put the batch range into its shapes and drop "
                    "batch, or make them agree")
