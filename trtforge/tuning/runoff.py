"""The run-off: the points that come within ``RUNOFF_MARGIN`` of the best feasible one are timed again, side by
side (``measure.timing.measure_interleaved``, the timing ``bench`` sweeps with), before ``choose`` picks.

The sweep times each candidate alone, one after another. Between near-tied candidates that order decides: on an
H100, MiniLM's ``compiled`` route read 18,398 items/s alone against 17,919 for ``cuda_graph`` (batch 8), and side by
side 13,543 against 15,362 (docs/tune.md). Interleaved rounds give every contender the same clocks and neighbours,
so the choice among them holds in a bench sweep of the same candidates. Points the run-off timed record it
(``Point.timed_with``) in the points file; a resumed run that measured nothing new runs no run-off (``sweep``), and
one that did re-times its contenders unless they were timed together already.

Example:
    >>> points = runoff(points, config, lambda near: time_side_by_side(near, sweep))
    >>> [p.timed_with for p in points]
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from trtforge.measure.timing import LatencyStats
from trtforge.tuning.candidates import OBJECTIVES, TuneConfig
from trtforge.tuning.pareto import Point, meets

#: A feasible point whose objective (throughput, or p99) lies within this share of the best one's is a contender.
RUNOFF_MARGIN = 0.10


def contenders(points: Sequence[Point], config: TuneConfig, margin: float = RUNOFF_MARGIN) -> list[Point]:
    """The feasible points (``--max-p99-ms``, ``--min-accuracy``) within ``margin`` of the best by the objective.

    Example:
        >>> contenders([best, within_5_percent, half_as_fast], TuneConfig(objective="throughput")) == [
        ...     best, within_5_percent]
        True
    """
    feasible = [p for p in points if meets(p, config.max_p99_ms, config.min_accuracy)]
    if not feasible:
        return []
    if config.chosen_by == OBJECTIVES[1]:
        best = max(p.throughput for p in feasible)
        return [p for p in feasible if p.throughput >= best * (1.0 - margin)]
    best = min(p.p99_ms for p in feasible)
    return [p for p in feasible if p.p99_ms <= best * (1.0 + margin)]


def runoff(points: Sequence[Point], config: TuneConfig,
           timer: Callable[[list[Point]], dict[str, LatencyStats]]) -> list[Point]:
    """``points`` with the contenders' latency and throughput replaced by ``timer``'s side-by-side measurement
    (keyed by candidate key), each marked with the keys it was timed with; unchanged when fewer than two contend,
    or when the contenders were timed together before (a resumed run)."""
    near = contenders(points, config)
    keys = tuple(sorted(p.candidate.key for p in near))
    if len(near) < 2 or all(p.timed_with == keys for p in near):
        return list(points)
    stats = timer(near)
    timed = {p.candidate.key: replace(p, p50_ms=stats[p.candidate.key].median_ms, p99_ms=stats[p.candidate.key].p99_ms,
                                      throughput=stats[p.candidate.key].throughput, timed_with=keys) for p in near}
    return [timed.get(p.candidate.key, p) for p in points]


def time_side_by_side(near: Sequence[Point], open_point: Callable[[Point], Any], rows: Callable[[int], dict],
                      config: TuneConfig) -> dict[str, LatencyStats]:
    """Every point of ``near`` opened (``open_point``) and timed in interleaved rounds on its own batch's rows
    (``rows(batch)``), ``config.warmup`` and ``config.repeats`` calls each, after each engine's first call (a compile,
    a capture) and Inductor's compile pool settle."""
    import torch

    from trtforge.measure.timing import measure_interleaved, settle_compile_workers

    with contextlib.ExitStack() as stack:
        calls, devices = {}, []
        for point in near:
            engine = stack.enter_context(open_point(point))
            device = torch.device(engine.device)
            inputs = {n: torch.from_numpy(a).to(device) for n, a in rows(point.candidate.batch).items()}
            calls[point.candidate.key] = lambda e=engine, x=inputs: e(**x)
            devices.append(device)
        for call in calls.values():
            call()
        settle_compile_workers()
        clock_device = next((d for d in devices if d.type == "cuda"), devices[0])  # CUDA events time CPU calls too
        stats = measure_interleaved(calls, clock_device, warmup=config.warmup, repeats=config.repeats)
    return {p.candidate.key: replace(stats[p.candidate.key], batch=p.candidate.batch) for p in near}
