"""``trtforge.tune``: sweep the deployments this device accelerates, measure each on the user's data, keep the
Pareto front, choose under the constraints, and record the choice in the artifact's ``tuned`` sidecar record.

Example:
    >>> report = trtforge.tune(model, data="data.npz", output_dir="tuned", routes=("eager", "onnxruntime"),
    ...                        batches=(1, 8), max_minutes=2, min_accuracy=0.99)
    >>> report.chosen.line(), report.artifact
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from trtforge.core.device_identity import this_device
from trtforge.core.errors import UserError
from trtforge.core.routes import TORCH_ROUTES
from trtforge.tuning.base import Base, built_base, needs_build, torch_base
from trtforge.tuning.candidates import (
    ENGINE_ROUTE,
    GRAPH_ROUTE,
    Candidate,
    Cut,
    DeviceFacts,
    Skip,
    SweepPlan,
    TuneConfig,
    plan_sweep,
)
from trtforge.tuning.measure import Builds, Counters, measure_point, open_candidate, reference_outputs
from trtforge.tuning.pareto import Point, choose
from trtforge.tuning.report import TuneReport, write_tuned_record
from trtforge.tuning.runoff import runoff, time_side_by_side
from trtforge.tuning.store import PointStore, versions
from trtforge.tuning.subject import Subject, open_subject

log = logging.getLogger(__name__)


def device_facts() -> DeviceFacts:
    """This machine's first GPU (its compute capability) and the TensorRT that builds here."""
    from trtforge.core import trt
    from trtforge.core.machine import compute_capabilities

    ccs = compute_capabilities()
    if not trt.available():  # an H200 without TensorRT: the PyTorch routes are swept, engines are skipped
        return DeviceFacts(ccs[0] if ccs else None, "", "")
    info = trt.info()
    return DeviceFacts(ccs[0] if ccs else None, info.flavour, info.version)


@dataclass
class Sweep:
    """The state of one run: what it builds, what it measured, the reference outputs once needed."""

    subject: Subject
    config: TuneConfig
    plan: SweepPlan
    builds: Builds
    base: Base
    store: PointStore
    counters: Counters
    deadline: float
    _reference: Any = None

    def artifact_of(self, candidate: Candidate) -> Any:
        if candidate.route in TORCH_ROUTES:
            return self.base.sidecar_path
        if candidate.route == GRAPH_ROUTE:
            return self.builds.get(candidate.precision).sidecar_path
        return self.builds.get(candidate.precision, candidate.opt_batch, candidate.opt_level).sidecar_path

    def open_point(self, point: Point) -> Any:
        """A measured point's engine again (its artifact in the output folder, else through the cache)."""
        path = self.builds.folder / point.artifact if point.artifact else None
        if path is None or not path.is_file():
            path = self.artifact_of(point.candidate)
        return open_candidate(point.candidate, path, self.subject, self.config.device)

    def reference(self) -> Any:
        if self._reference is None:
            self._reference = reference_outputs(self.base, self.subject, max(self.config.batches))
        return self._reference

    def seconds_left(self) -> float:
        return self.deadline - time.monotonic()


def tune(model_or_artifact: Any, data: Any, output_dir: str | Path = "trtforge_tuned", config: TuneConfig | None = None,
         *, name: str | None = None, preprocessing: Any = None, progress: bool = True, **options: Any) -> TuneReport:
    """Measure route × precision × batch (× opt batch × optimization level on the TensorRT route) on ``data`` and
    choose: the lowest p99 (or, under ``max_p99_ms``, the highest throughput) whose accuracy against the FP32
    reference is at least ``min_accuracy``. ``options`` are ``TuneConfig`` fields (``routes``, ``precisions``,
    ``batches``, ``opt_levels``, ``max_minutes``, ``max_p99_ms``, ``min_accuracy``, ``objective``, ``warmup``,
    ``repeats``, ``device``). Points measured before in ``output_dir`` on this device are reused.

    Example:
        >>> report = tune("model.onnx", "data.npz", "tuned", routes=("onnxruntime",), max_minutes=1)
        >>> report.chosen.candidate.precision, report.artifact.name
        ('fp16', 'model_fp16.json')
    """
    config = replace(config, **options) if config is not None else TuneConfig(**options)
    subject = open_subject(model_or_artifact, data, name=name, preprocessing=preprocessing)
    start = time.monotonic()
    facts = device_facts()
    plan = plan_sweep(config, facts, has_model=subject.model is not None)
    for skip in plan.skipped:
        log.warning("tune: %s", skip.why)
    folder = Path(output_dir)
    folder.mkdir(parents=True, exist_ok=True)
    counters = Counters()
    builds = Builds(subject, folder, config.batches, plan.opt_levels[0], counters)
    if needs_build(plan, facts) or subject.model is None:  # the first build: the FP32 reference graph, the sidecar
        base = built_base(builds.get(plan.precisions[0]))
    else:  # PyTorch routes only: nothing is built (TensorRT may be absent), PyTorch FP32 is the reference
        base = torch_base(subject, folder)
    store = PointStore(folder, _identity(base, subject, config))
    sweep = Sweep(subject, config, plan, builds, base, store, counters, start + config.max_seconds)
    points, skipped, left = _run(sweep, progress)
    report = _finish(sweep, points, tuple(plan.skipped) + tuple(skipped), tuple(left), time.monotonic() - start)
    return report


def _identity(base: Base, subject: Subject, config: TuneConfig) -> dict[str, Any]:
    """What a measured point depends on besides its candidate: model, data, device, versions, timing window."""
    device = this_device()
    return {"model": base.model_sha256, "data": subject.data_sha256,
            "device": {"kind": device.kind, "name": device.name, "driver": device.driver}, "versions": versions(),
            "timing": {"warmup": config.warmup, "repeats": config.repeats, "device": config.device}}


def _run(sweep: Sweep, progress: bool) -> tuple[list[Point], list[Skip], list[Cut]]:
    """Every candidate, cheap first: reused when the points file has it, else built, checked and timed while
    the budget lasts (``_cut``). A candidate whose build or run is refused becomes a skip with that line."""
    from trtforge.builder.progress import StepProgress

    points: list[Point] = []
    skipped: list[Skip] = []
    left: list[Cut] = []
    took: dict[str, float] = {}  # route -> seconds its last measured candidate took (build, accuracy, timing)
    with StepProgress(f"tune {sweep.subject.name}", enabled=progress) as steps:
        for candidate in sweep.plan.candidates:
            known = sweep.store.get(candidate)
            if known is not None:
                sweep.counters.reused += 1
                points.append(known)
                continue
            cut = _cut(candidate, sweep.seconds_left(), took.get(candidate.route))
            if cut is not None:
                left.append(cut)
                continue
            step = steps.stage(f"{candidate.key} (build, accuracy, timing; {sweep.seconds_left():.0f} s left)", 3)
            try:
                reference = sweep.reference()  # once per run, outside what the candidate took
                started = time.monotonic()
                sidecar_path = sweep.artifact_of(candidate)
                step()
                point = measure_point(candidate, sidecar_path, sweep.subject, reference, sweep.base.task,
                                      sweep.config, step)
            except UserError as exc:
                skipped.append(Skip(candidate.route, f"{candidate.key}: {exc}"))
                log.warning("tune: %s: %s", candidate.key, exc)
                continue
            took[candidate.route] = time.monotonic() - started
            sweep.counters.measured += 1
            sweep.store.put(point)
            sweep.store.save()  # after each point: an interrupted run resumes from here
            points.append(point)
        _build_untimed_engines(sweep, skipped)
    return points, skipped, left


def _cut(candidate: Candidate, seconds_left: float, route_took: float | None) -> Cut | None:
    """A candidate starts while the budget lasts and, once its route has measured one, while the time left covers
    what that one took: a candidate is not interrupted, and ``compiled`` compiles for minutes at each batch."""
    if seconds_left <= 0:
        return Cut(candidate)
    if route_took is not None and route_took > seconds_left:
        return Cut(candidate, f"{seconds_left:.0f} s of the budget were left and the route's last candidate took "
                              f"{route_took:.0f} s")
    return None


def _build_untimed_engines(sweep: Sweep, skipped: list[Skip]) -> None:
    """Where engines cannot be timed here, each precision is still built once (while the budget lasts): it shows
    the precision builds for this model (the onnxruntime route's builds already did, through the same cache)."""
    plan = sweep.plan
    if not any(s.route == ENGINE_ROUTE for s in plan.skipped) or any(c.route == ENGINE_ROUTE for c in plan.candidates):
        return
    for precision in plan.precisions:
        if sweep.seconds_left() <= 0:
            return
        try:
            sweep.builds.get(precision)
        except UserError as exc:
            skipped.append(Skip(ENGINE_ROUTE, f"route {ENGINE_ROUTE}: the {precision} build is refused: {exc}"))


def _finish(sweep: Sweep, points: list[Point], skipped: tuple[Skip, ...], left: tuple[Cut, ...],
            elapsed: float) -> TuneReport:
    if left:
        log.warning("tune: the %.3g-minute budget cut %d candidate(s): %s", sweep.config.max_minutes,
                    len(left), "; ".join(f"{c.key} ({c.why})" for c in left))
    config = sweep.config
    if sweep.counters.measured:  # a resumed run that measured nothing times nothing: the points file's numbers
        points = runoff(points, config,
                        lambda near: time_side_by_side(near, sweep.open_point, sweep.subject.rows, config))
        for point in points:
            if point.timed_with:
                sweep.store.put(point)
        sweep.store.save()
    chosen = choose(points, config.max_p99_ms, config.min_accuracy, config.chosen_by)
    artifact = sweep.builds.folder / (chosen.artifact or sweep.base.sidecar_path.name)
    if not artifact.is_file():  # removed since the run that measured it: the cache gives it back
        artifact = sweep.artifact_of(chosen.candidate)
    write_tuned_record(artifact, chosen, sweep.base.task, versions())
    return TuneReport.of(points, chosen, skipped, left, artifact, sweep.counters, elapsed, this_device(),
                         sweep.base.task)
