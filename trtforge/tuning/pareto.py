"""Measured points, their Pareto front (p99 latency ↓, throughput ↑, accuracy ↑) and the choice under constraints.

Example:
    >>> a = Point(Candidate("eager", "fp32", 1), p50_ms=2, p99_ms=3, throughput=500, accuracy=1.0)
    >>> b = Point(Candidate("eager", "fp32", 8), p50_ms=9, p99_ms=12, throughput=900, accuracy=1.0)
    >>> pareto_front([a, b])
    (True, True)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from trtforge.core.errors import Unsupported, spelled
from trtforge.tuning.candidates import OBJECTIVES, Candidate


class ConstraintUnmet(Unsupported):
    """No measured point meets ``--max-p99-ms`` / ``--min-accuracy``; the message names the closest one."""


@dataclass(frozen=True)
class Point:
    """One measured candidate: latency p50/p99 (ms) and throughput (items/s) at its batch, and its accuracy against
    the FP32 reference (top-1 agreement, or the lowest cosine over the outputs). ``artifact``: the sidecar (in the
    output folder) the candidate ran from."""

    candidate: Candidate
    p50_ms: float
    p99_ms: float
    throughput: float
    accuracy: float
    artifact: str | None = None
    #: the candidate keys of the run-off it was timed in, side by side (``tuning.runoff``); () timed alone
    timed_with: tuple[str, ...] = ()

    def as_json(self, pareto: bool) -> dict[str, Any]:
        """The ``--json`` schema's point: route, precision, batch, opt_batch, builder, p50_ms, p99_ms, throughput,
        accuracy, pareto, timed_with."""
        c = self.candidate
        return {"route": c.route, "precision": c.precision, "batch": c.batch, "opt_batch": c.opt_batch,
                "builder": c.builder, "p50_ms": self.p50_ms, "p99_ms": self.p99_ms, "throughput": self.throughput,
                "accuracy": self.accuracy, "pareto": pareto, "timed_with": list(self.timed_with)}

    def to_record(self) -> dict[str, Any]:
        """Everything, for the points file (``from_record`` reads it back)."""
        return {**asdict(self), "candidate": asdict(self.candidate), "timed_with": list(self.timed_with)}

    @classmethod
    def from_record(cls, data: dict[str, Any]) -> Point:
        return cls(**{**data, "candidate": Candidate(**data["candidate"]),
                      "timed_with": tuple(data.get("timed_with", ()))})

    def line(self) -> str:
        """``eager fp32 batch 1: p99 3.1 ms, 512 items/s, accuracy 1.000``."""
        c = self.candidate
        knobs = "" if c.opt_batch is None else f" (opt batch {c.opt_batch}, opt level {c.opt_level})"
        return (f"{c.route} {c.precision} batch {c.batch}{knobs}: p99 {self.p99_ms:.3g} ms, "
                f"{self.throughput:.4g} items/s, accuracy {self.accuracy:.4f}")


def dominates(a: Point, b: Point) -> bool:
    """``a`` is at least as good as ``b`` on every objective and better on one."""
    at_least = a.p99_ms <= b.p99_ms and a.throughput >= b.throughput and a.accuracy >= b.accuracy
    better = a.p99_ms < b.p99_ms or a.throughput > b.throughput or a.accuracy > b.accuracy
    return at_least and better


def pareto_front(points: Sequence[Point]) -> tuple[bool, ...]:
    """For each point, whether no other point dominates it (equal points are both on the front)."""
    return tuple(not any(dominates(other, p) for other in points if other is not p) for p in points)


def meets(point: Point, max_p99_ms: float | None, min_accuracy: float | None) -> bool:
    return ((max_p99_ms is None or point.p99_ms <= max_p99_ms)
            and (min_accuracy is None or point.accuracy >= min_accuracy))


def shortfall(point: Point, max_p99_ms: float | None, min_accuracy: float | None) -> float:
    """How far ``point`` misses the bounds, each as a fraction of its bound (0 when it meets them)."""
    late = max(0.0, point.p99_ms / max_p99_ms - 1.0) if max_p99_ms else 0.0
    short = max(0.0, (min_accuracy - point.accuracy) / min_accuracy) if min_accuracy else 0.0
    return late + short


def choose(points: Sequence[Point], max_p99_ms: float | None = None, min_accuracy: float | None = None,
           objective: str = OBJECTIVES[0]) -> Point:
    """The point meeting the bounds with the lowest p99 (``latency``) or the highest throughput (``throughput``);
    ties go to the more accurate, then the earlier (cheaper) point. None meeting them: ``ConstraintUnmet``.

    Example:
        >>> choose([a, b], max_p99_ms=10, objective="throughput") is a
        True
    """
    if not points:
        raise ConstraintUnmet("no point was measured (every route was skipped or the budget ran out first); "
                              f"give more time ({spelled(cli='--max-minutes', python='max_minutes=')}) or another "
                              "route")
    feasible = [p for p in points if meets(p, max_p99_ms, min_accuracy)]
    if not feasible:
        near = min(points, key=lambda p: (shortfall(p, max_p99_ms, min_accuracy), p.p99_ms))
        bounds = " and ".join(b for b in (
            None if max_p99_ms is None else f"p99 ≤ {max_p99_ms:g} ms",
            None if min_accuracy is None else f"accuracy ≥ {min_accuracy:g}") if b)
        raise ConstraintUnmet(f"no point of {len(points)} meets {bounds}; the closest is {near.line()}; relax "
                              f"{spelled(cli='--max-p99-ms or --min-accuracy', python='max_p99_ms or min_accuracy')}")
    if objective == OBJECTIVES[1]:
        return min(feasible, key=lambda p: (-p.throughput, -p.accuracy, p.p99_ms))
    return min(feasible, key=lambda p: (p.p99_ms, -p.accuracy, -p.throughput))
