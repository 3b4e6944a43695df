"""Batch specs: how many samples each TensorRT optimization profile takes (min, opt, max).

Accepted specs: ``1`` (static), ``(1, 8, 32)`` (one dynamic profile), ``[(1,1,1), (1,8,32)]``
(several profiles), or the CLI strings ``"8"``, ``"1:8:32"`` and ``"1:1:1,1:8:32"``.

Example:
    >>> parse_batch("1:8:32")
    (BatchProfile(min=1, opt=8, max=32),)
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
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


def resolve_batch(config: Any, example: Mapping[str, Any] | Sequence[Any] | None,
                  batched: Collection[str] | None = None) -> tuple[BatchProfile, ...] | None:
    """The one batch rule, on every path: the batch profiles a build takes.

    - ``config.batch`` when given.
    - ``batch=None`` and every batched input of ``example`` has the same dim 0 N > 1: ``1:N:N``, so the
      engine runs the example it was shown and batch 1.
    - else None: the graph's own batch (1 where dim 0 is dynamic, its fixed size where not;
      ``own_batch`` for a module).

    ``example`` maps input names to arrays (or is a sequence of tensors, named by position);
    ``batched`` names the inputs whose dim 0 is the batch (None: every input with a dim 0).

    Why ``1:N:N``, not ``N:N:N``: it is what the ONNX path always built, so its engine cache keys stay;
    the direct path (and its partitions) built ``N:N:N`` for ``batch=None`` before issue 36, so their
    keys change for examples of batch N > 1 (batch-1 examples resolve to None on every path, as before).
    Where the module's batch cannot range (torch.export fixes it), the paths build N as it is.

    Example:
        >>> resolve_batch(CompileConfig(), {"x": np.zeros((2, 3))})
        (BatchProfile(min=1, opt=2, max=2),)
    """
    if config.batch is not None:
        return tuple(config.batch)
    if not example:
        return None
    items = example.items() if isinstance(example, Mapping) else enumerate(example)
    rows = {int(value.shape[0]) for name, value in items
            if (batched is None or name in batched) and len(getattr(value, "shape", ()))}
    if len(rows) != 1 or min(rows) < 2:
        return None
    (count,) = rows
    return (BatchProfile(1, count, count),)


def own_batch(example_inputs: Sequence[Any]) -> tuple[BatchProfile, ...]:
    """A module's own batch, where ``resolve_batch`` gives None or its batch cannot range: the first example
    input's dim 0, static (1 for a scalar or no input).

    Example:
        >>> own_batch([np.zeros((2, 3))])
        (BatchProfile(min=2, opt=2, max=2),)
    """
    first = example_inputs[0] if example_inputs else None
    shape = tuple(getattr(first, "shape", ()))
    rows = int(shape[0]) if shape else 1
    return (BatchProfile(rows, rows, rows),)


def constraint_violation(exc: BaseException) -> bool:
    """Whether torch.export refused the dynamic dims (a dim 0 that is not a free batch)."""
    while exc is not None:
        kind = getattr(exc, "error_type", None)
        if type(exc).__name__ == "ConstraintViolationError" or getattr(kind, "name", "") == "CONSTRAINT_VIOLATION":
            return True
        exc = exc.__cause__
    return False


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

