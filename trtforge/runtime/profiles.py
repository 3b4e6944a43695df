"""Checking call shapes against specs and optimization profiles, and choosing a profile.

A profile is ``{input name: {"min": [...], "opt": [...], "max": [...]}}``. In a multi-profile
engine the call's shapes pick the profile: among the profiles that hold every input shape, the
one with the smallest maximum batch (its kernels were tuned closest to this batch).

Example:
    >>> profiles = ({"x": {"min": [1, 3], "opt": [4, 3], "max": [8, 3]}},
    ...             {"x": {"min": [9, 3], "opt": [16, 3], "max": [32, 3]}})
    >>> choose_profile(profiles, {"x": (12, 3)})
    1
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from trtforge.core.specs import TensorSpec
from trtforge.runtime.protocol import EngineInputError, Profiles


def check_rank_and_dims(spec: TensorSpec, shape: Sequence[int]) -> None:
    """Refuse a shape whose rank or fixed dimensions differ from ``spec``."""
    shape = tuple(int(d) for d in shape)
    if len(shape) != len(spec.shape):
        raise EngineInputError(
            f"input {spec.name!r} has rank {len(shape)} (shape {list(shape)}); the engine expects rank "
            f"{len(spec.shape)} {list(spec.shape)} (-1 = any). Add or remove axes, e.g. x[None] for "
            "a batch of one"
        )
    for axis, (got, want) in enumerate(zip(shape, spec.shape, strict=False)):
        if want >= 0 and got != want:
            raise EngineInputError(
                f"input {spec.name!r} has size {got} on axis {axis} (shape {list(shape)}); the engine "
                f"expects {list(spec.shape)} (-1 = any). Resize the input to match"
            )


def _fits(profile: Mapping[str, Mapping[str, Sequence[int]]], shapes: Mapping[str, Sequence[int]]) -> bool:
    for name, shape in shapes.items():
        ranges = profile.get(name)
        if ranges is None:
            continue
        lo, hi = ranges["min"], ranges["max"]
        if len(lo) != len(shape):
            return False
        if any(not (a <= d <= b) for d, a, b in zip(shape, lo, hi, strict=False)):
            return False
    return True


def describe_profiles(profiles: Profiles) -> str:
    """``profile 0: images [1,3,224,224]..[8,3,224,224]; profile 1: ...``"""
    parts = []
    for index, profile in enumerate(profiles):
        ranges = ", ".join(
            f"{name} {list(r['min'])}..{list(r['max'])}" for name, r in profile.items()
        )
        parts.append(f"profile {index}: {ranges}")
    return "; ".join(parts)


def _max_batch(profile: Mapping[str, Mapping[str, Sequence[int]]]) -> int:
    return max((r["max"][0] for r in profile.values() if r["max"]), default=0)


def choose_profile(profiles: Profiles, shapes: Mapping[str, Sequence[int]]) -> int:
    """Index of the profile that holds every shape, the smallest maximum batch first.

    Raises EngineInputError naming the allowed ranges when no profile holds the shapes.
    With no profiles (a static engine, or a route without profiles) the answer is 0.
    """
    if not profiles:
        return 0
    shapes = {k: tuple(int(d) for d in v) for k, v in shapes.items()}
    fitting = [i for i, p in enumerate(profiles) if _fits(p, shapes)]
    if not fitting:
        given = ", ".join(f"{k} {list(v)}" for k, v in shapes.items())
        raise EngineInputError(
            f"input shape(s) {given} lie outside every optimization profile of this engine. "
            f"Allowed: {describe_profiles(profiles)}. Split the batch, or rebuild the engine with "
            "a wider batch= range"
        )
    return min(fitting, key=lambda i: (_max_batch(profiles[i]), i))


def max_shapes(profile: Mapping[str, Mapping[str, Sequence[int]]]) -> dict[str, tuple[int, ...]]:
    """The largest shape of each input in one profile."""
    return {name: tuple(int(d) for d in r["max"]) for name, r in profile.items()}


def check_shape_values(name: str, values: Sequence[int], low: Sequence[int], high: Sequence[int],
                       recorded: Sequence[int] | None) -> None:
    """Refuse shape-tensor input values outside the profile's range ``low``..``high`` (TensorRT's
    ``get_tensor_profile_values``), naming the values the engine was built for (``recorded``, from the sidecar).

    Example:
        >>> check_shape_values("shape", [3, 2], [3, 2], [3, 2], [3, 2])   # fits: no error
    """
    values = [int(v) for v in values]
    if len(values) == len(low) == len(high) and all(a <= v <= b for v, a, b in zip(values, low, high, strict=True)):
        return
    built, fix = ((list(recorded), f"pass {name}={list(recorded)} or leave it out") if recorded is not None
                  else (f"{list(low)}..{list(high)}", "pass values in that range"))
    raise EngineInputError(
        f"shape-tensor input {name!r} = {values} lies outside the values this engine was built for ({built}); "
        f"{fix}, or rebuild the engine with these values in the example inputs")
