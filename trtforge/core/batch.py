"""Batch specs: how many samples each TensorRT optimization profile takes (min, opt, max).

Accepted specs: ``1`` (static), ``(1, 8, 32)`` (one dynamic profile), ``[(1,1,1), (1,8,32)]``
(several profiles), or the CLI strings ``"8"``, ``"1:8:32"`` and ``"1:1:1,1:8:32"``.

Example:
    >>> parse_batch("1:8:32")
    (BatchProfile(min=1, opt=8, max=32),)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from trtforge.core.errors import InvalidArgument


class BatchSpecError(InvalidArgument):
    """A batch spec that cannot describe a TensorRT profile."""


#: TensorRT dims are signed 32-bit integers.
MAX_BATCH = 2**31 - 1


@dataclass(frozen=True)
class BatchProfile:
    """One optimization profile's batch range."""

    min: int
    opt: int
    max: int

    def __post_init__(self) -> None:
        for label, value in (("min", self.min), ("opt", self.opt), ("max", self.max)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise BatchSpecError(f"batch {label}={value!r} must be a positive integer (got {self})")
            if value > MAX_BATCH:
                raise BatchSpecError(f"batch {label}={value} is larger than TensorRT's dims allow ({MAX_BATCH}); "
                                     "give a batch that fits the GPU, e.g. 1:8:32")
        if not self.min <= self.opt <= self.max:
            raise BatchSpecError(
                f"batch profile needs min <= opt <= max, got min={self.min} opt={self.opt} max={self.max}; "
                "write it as min:opt:max, e.g. 1:8:32"
            )

    @property
    def static(self) -> bool:
        return self.min == self.opt == self.max

    def __str__(self) -> str:
        return f"{self.min}:{self.opt}:{self.max}"


#: ``batch=None`` on a graph with a dynamic dim 0: one profile at batch 1 (named here once; import it).
DEFAULT_BATCH: tuple[BatchProfile, ...] = (BatchProfile(1, 1, 1),)


def example_batch(example_inputs: Sequence[Any]) -> tuple[int, int, int]:
    """The model's own batch when none is asked on the direct path: the first example input's dim 0, static
    (1 for a scalar or no input).

    Example:
        >>> example_batch([np.zeros((2, 3))])
        (2, 2, 2)
    """
    first = example_inputs[0] if example_inputs else None
    shape = tuple(getattr(first, "shape", ()))
    rows = int(shape[0]) if shape else 1
    return (rows, rows, rows)


def _one(spec: Any) -> BatchProfile:
    if isinstance(spec, BatchProfile):
        return spec
    if isinstance(spec, bool):
        raise BatchSpecError(f"batch must be an int or (min, opt, max), not {spec!r}")
    if isinstance(spec, int):
        return BatchProfile(spec, spec, spec)
    if isinstance(spec, str):
        parts = spec.strip().split(":")
        try:
            numbers = [int(p) for p in parts]
        except ValueError as exc:
            raise BatchSpecError(f"batch {spec!r}: write N or min:opt:max with integers, e.g. 1:8:32") from exc
        if len(numbers) == 1:
            return BatchProfile(numbers[0], numbers[0], numbers[0])
        if len(numbers) == 3:
            return BatchProfile(*numbers)
        raise BatchSpecError(f"batch {spec!r}: write N or min:opt:max, e.g. 1:8:32")
    if isinstance(spec, Sequence) and len(spec) == 3 and all(isinstance(v, int) for v in spec):
        return BatchProfile(*spec)
    raise BatchSpecError(f"batch spec {spec!r}: use an int, (min, opt, max), a list of those, or '1:8:32'")


def parse_batch(spec: Any) -> tuple[BatchProfile, ...]:
    """Normalise any accepted batch spec into a tuple of profiles (one per TensorRT profile); no profile twice."""
    profiles = _profiles(spec)
    repeated = sorted({str(p) for p in profiles if profiles.count(p) > 1})
    if repeated:
        raise BatchSpecError(f"batch profile {', '.join(repeated)} is given twice; give each profile once, "
                             "e.g. 1:1:1,1:8:32")
    return profiles


def _profiles(spec: Any) -> tuple[BatchProfile, ...]:
    if isinstance(spec, str) and "," in spec:
        return tuple(_one(part) for part in spec.split(",") if part.strip())
    if isinstance(spec, Sequence) and not isinstance(spec, str) and spec and not all(
        isinstance(v, int) for v in spec
    ):
        profiles = tuple(_one(part) for part in spec)
        if not profiles:
            raise BatchSpecError("batch list is empty; give at least one profile")
        return profiles
    return (_one(spec),)


def guess_batched(inputs: Sequence[tuple[str, Sequence[int]]], chosen: Sequence[str] | None = None) -> tuple[str, ...]:
    """The inputs whose dim 0 is the batch, from example shapes: the one batch rule for modules.

    ``chosen`` (``batched_inputs=``) decides when given. Otherwise an input is batched when its
    dim 0 equals the first input's dim 0; one whose dim 0 differs stays static, scalars too.
    ONNX files say it themselves: a dynamic dim 0 is the batch (``builder.profiles``).

    Example:
        >>> guess_batched([("a", (3, 4)), ("b", (4, 3))])
        ('a',)
    """
    names = [name for name, _ in inputs]
    if chosen is not None:
        unknown = [c for c in chosen if c not in names]
        if unknown:
            raise BatchSpecError(f"batched_inputs names unknown input(s) {unknown}; inputs are {', '.join(names)}")
        scalars = [name for name, shape in inputs if name in chosen and not len(shape)]
        if scalars:
            raise BatchSpecError(f"batched_inputs names scalar input(s) {scalars}, which have no dim 0")
        return tuple(name for name in names if name in chosen)
    first = next((shape[0] for _, shape in inputs if len(shape)), None)
    return tuple(name for name, shape in inputs if len(shape) and shape[0] == first)

