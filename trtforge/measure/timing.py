"""Latency measurement: CUDA events on the GPU, ``perf_counter`` on the CPU; median, p90, p99.

Each repeat is one synchronized call, so a number is a latency (what one caller waits), not a
pipelined throughput. Throughput is items per second at the median latency.

Example:
    >>> stats = measure(lambda: engine(x), torch.device("cuda"), warmup=20, repeats=200, batch=8)
    >>> f"{stats.median_ms:.3f} ms, {stats.throughput:.0f} img/s"
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

from trtforge.core.errors import InvalidArgument


@dataclass(frozen=True)
class LatencyStats:
    """Latency percentiles of ``repeats`` calls (milliseconds), and items per second."""

    median_ms: float
    p90_ms: float
    p99_ms: float
    mean_ms: float
    min_ms: float
    repeats: int
    batch: int
    clock: str  # "cuda_events" | "perf_counter"

    @property
    def throughput(self) -> float:
        return self.batch * 1000.0 / self.median_ms if self.median_ms > 0 else float("inf")

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "throughput": self.throughput}

    @classmethod
    def from_samples(cls, samples_ms: list[float], batch: int, clock: str) -> LatencyStats:
        a = np.asarray(samples_ms, dtype=np.float64)
        return cls(
            median_ms=float(np.median(a)), p90_ms=float(np.percentile(a, 90)),
            p99_ms=float(np.percentile(a, 99)), mean_ms=float(a.mean()), min_ms=float(a.min()),
            repeats=len(a), batch=batch, clock=clock,
        )


def measure(
    fn: Callable[[], Any], device: torch.device, *, warmup: int = 10, repeats: int = 100, batch: int = 1
) -> LatencyStats:
    """Call ``fn`` ``warmup`` times, then time ``repeats`` synchronized calls."""
    return measure_interleaved({"call": fn}, device, warmup=warmup, repeats=repeats, batch=batch)["call"]


def call_timer(device: torch.device) -> tuple[Callable[[Callable[[], Any]], float], str]:
    """(a function that calls ``fn`` once, synchronized, and returns its milliseconds; the clock's name): CUDA
    events on a GPU, ``perf_counter`` elsewhere. Shared by ``measure_interleaved`` and the bench scripts' windows.

    Example:
        >>> timed, clock = call_timer(torch.device("cpu")); timed(lambda: None) >= 0, clock
        (True, 'perf_counter')
    """
    device = torch.device(device)
    if device.type != "cuda":
        def timed_cpu(fn: Callable[[], Any]) -> float:
            t0 = time.perf_counter()
            fn()
            return (time.perf_counter() - t0) * 1000.0

        return timed_cpu, "perf_counter"
    torch.cuda.synchronize(device)
    stream = torch.cuda.current_stream(device)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def timed_cuda(fn: Callable[[], Any]) -> float:
        start.record(stream)
        fn()
        end.record(stream)
        end.synchronize()
        return start.elapsed_time(end)

    return timed_cuda, "cuda_events"


def measure_interleaved(
    fns: Mapping[str, Callable[[], Any]], device: torch.device, *, warmup: int = 10, repeats: int = 100,
    batch: int = 1,
) -> dict[str, LatencyStats]:
    """Time several calls side by side: each round calls every ``fn`` once, in a rotating order.

    Clock drift, boost clocks and neighbours hit every candidate alike, so the ratios of the
    medians hold within one run. Example:
        >>> stats = measure_interleaved({"model": lambda: engine(x), "e2e": lambda: predict(frame)}, dev)
        >>> stats["e2e"].median_ms / stats["model"].median_ms
    """
    if repeats < 1:
        raise InvalidArgument(f"repeats={repeats}: time at least one call")
    device = torch.device(device)
    names = list(fns)
    for _ in range(warmup):
        for name in names:
            fns[name]()
    samples: dict[str, list[float]] = {name: [] for name in names}
    timed, clock = call_timer(device)
    for r in range(repeats):
        for name in names[r % len(names):] + names[: r % len(names)]:
            samples[name].append(timed(fns[name]))
    return {name: LatencyStats.from_samples(samples[name], batch, clock) for name in names}


def settle_compile_workers() -> str:
    """Shut down Inductor's compile-worker pool if a compile started one; what was done, in words.

    The pool's processes take a core for seconds while they start (measured on the H200: a pageable
    frame's host copy stalled at 6.2 ms instead of 0.04 ms for 6–7 s after the first compile), so
    timings taken right after a first compile measure that start-up, not the call. Benchmarks
    call this after their warm-up calls and record the answer in their JSON; a later compile
    starts a new pool.

    Example:
        >>> predictor(frame); settle_compile_workers()
        'no compile-worker pool was running'
    """
    import sys

    module = sys.modules.get("torch._inductor.async_compile")
    pools = len(getattr(module, "_pool_set", ())) if module is not None else 0
    if not pools:
        return "no compile-worker pool was running"
    module.shutdown_compile_workers()
    return f"{pools} compile-worker pool(s) shut down after the warm-up calls"
