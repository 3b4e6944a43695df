"""One candidate of ``tune``: its build through the engine cache, its accuracy against the FP32 reference on the
user's data (``check``'s judge, the task's metric), and its latency/throughput (``bench``'s timing code).

Example:
    >>> builds = Builds(subject, Path("tuned"), max_batch=8)
    >>> art = builds.get("fp16", opt_batch=1, opt_level=3)
    >>> point = measure_point(candidate, art.sidecar_path, subject, reference, "classification", config)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from trtforge.core.config import QUANTIZED_PRECISIONS
from trtforge.core.routes import TORCH_ROUTES
from trtforge.tuning.candidates import GRAPH_ROUTE, Candidate, TuneConfig
from trtforge.tuning.pareto import Point
from trtforge.tuning.subject import Subject


@dataclass
class Counters:
    """What a run did: engine builds (engine-cache misses), cache hits, points measured and points reused."""

    builds: int = 0
    cache_hits: int = 0
    measured: int = 0
    reused: int = 0


class Builds:
    """The artifacts of one run, one per (precision, opt batch, optimization level), compiled through the engine
    cache into the output folder; the first opt batch and level keep the plain name (``NAME_fp16.json``). The folder
    is tune's: a build of another profile (another run's ``--batch``) replaces the one of the same name there."""

    def __init__(self, subject: Subject, folder: Path, batches: tuple[int, ...], first_level: int,
                 counters: Counters) -> None:
        self.subject, self.folder, self.counters = subject, Path(folder), counters
        self.batches, self.first_level = tuple(sorted(batches)), first_level
        self._made: dict[tuple, Any] = {}

    def name(self, opt_batch: int, opt_level: int) -> str:
        if (opt_batch, opt_level) == (self.batches[0], self.first_level):
            return self.subject.name
        return f"{self.subject.name}_ob{opt_batch}_O{opt_level}"

    @cached_property
    def _graph_inputs(self) -> tuple:
        """The ONNX file's input specs, read once per run (none for a module)."""
        if not isinstance(self.subject.source, Path):
            return ()
        import onnx

        from trtforge.capture.onnx_file import graph_io

        return graph_io(onnx.load(self.subject.source, load_external_data=False))[0]

    def data_shapes(self, opt_batch: int) -> tuple:
        """An ONNX file whose inputs have dynamic dims beyond the batch: every input's profile, the batch range of
        the sweep with the other dims as ``--data`` has them (the shapes tune measures at); () otherwise."""
        specs = self._graph_inputs
        if not any(d < 0 for spec in specs for d in spec.shape[1:]):
            return ()
        return tuple((spec.name, tuple((b, *self.subject.data[spec.name].shape[1:])
                                       for b in (1, opt_batch, self.batches[-1])))
                     for spec in specs if spec.name in self.subject.data)

    def get(self, precision: str, opt_batch: int | None = None, opt_level: int | None = None) -> Any:
        """The artifact (``trtforge.Artifact``) of this build: made once per run, a cache hit when built before."""
        from trtforge.pipeline import compile as compile_model

        opt_batch = self.batches[0] if opt_batch is None else opt_batch
        opt_level = self.first_level if opt_level is None else opt_level
        key = (precision, opt_batch, opt_level)
        if key not in self._made:
            module = not isinstance(self.subject.source, Path)
            options: dict[str, Any] = {"input_names": self.subject.input_names} if module else {}
            if precision in QUANTIZED_PRECISIONS:
                options["calibration_data"] = self.subject.data
            shapes = self.data_shapes(opt_batch)
            batch = {"shapes": shapes} if shapes else {"batch": [(1, opt_batch, self.batches[-1])]}
            art = compile_model(self.subject.source, self.subject.example_inputs(), precision=precision,
                                **batch, optimization_level=opt_level,
                                output_dir=self.folder, name=self.name(opt_batch, opt_level),
                                preprocessing=self.subject.preprocessing, progress=False, overwrite=True, **options)
            hit = bool((art.sidecar.builder.cache or {}).get("hit"))
            self.counters.cache_hits += hit
            self.counters.builds += not hit
            self._made[key] = art
        return self._made[key]


def accuracy_of(judgement: Any) -> float:
    """One number, higher is better: top-1 agreement with the FP32 reference for a classifier, else the lowest
    cosine similarity over the outputs."""
    values = [o.top1 for o in judgement.outputs] if judgement.task == "classification" else []
    if not values or any(v is None for v in values):
        values = [o.cosine for o in judgement.outputs]
    return float(min(values))


def reference_outputs(base: Any, subject: Subject, batch: int) -> dict[str, np.ndarray]:
    """The FP32 reference's outputs on every sample: the reference graph in ONNX Runtime (``check``'s reference),
    or for a PyTorch-only run (``base.torch_reference``) the model in FP32 on the CPU."""
    from trtforge.debug.check import run_batches
    from trtforge.measure.inputs import split_batches
    from trtforge.runtime.load import load

    route, options = ("eager", {"model": subject.model}) if base.torch_reference else ("onnxruntime", {})
    with load(base.sidecar_path, route=route, device="cpu", **options) as reference:
        return run_batches(reference, split_batches(subject.data, batch))


def open_candidate(candidate: Candidate, sidecar_path: Path, subject: Subject, device: Any) -> Any:
    """The candidate's engine: ``trtforge.load`` on its route, at the artifact's own precision."""
    from trtforge.runtime.load import load, route_options

    options = route_options(candidate.route)
    if candidate.route in TORCH_ROUTES:
        options["model"] = subject.model
    elif candidate.route == GRAPH_ROUTE and device is not None and str(device) != "cpu":
        import onnxruntime as ort

        if "CUDAExecutionProvider" not in ort.get_available_providers():
            device = "cpu"  # the graph runs where ONNX Runtime can, as bench runs it
    return load(sidecar_path, route=candidate.route, device=device, **options)


def measure_point(candidate: Candidate, sidecar_path: Path, subject: Subject, reference: dict[str, np.ndarray],
                  task: str, config: TuneConfig, step: Callable[[], None] = lambda: None) -> Point:
    """Run every sample through the candidate (accuracy), then time ``config.repeats`` calls at its batch."""
    import torch

    from trtforge.debug.check import run_batches
    from trtforge.debug.tolerances import judge
    from trtforge.measure.inputs import split_batches
    from trtforge.measure.timing import measure

    with open_candidate(candidate, sidecar_path, subject, config.device) as engine:
        outputs = run_batches(engine, split_batches(subject.data, candidate.batch))
        judgement = judge(reference, outputs, task=task, precision=candidate.precision)
        step()
        device = torch.device(engine.device)
        inputs = {n: torch.from_numpy(a).to(device) for n, a in subject.rows(candidate.batch).items()}
        stats = measure(lambda: engine(**inputs), device, warmup=config.warmup, repeats=config.repeats,
                        batch=candidate.batch)
        step()
    return Point(candidate, stats.median_ms, stats.p99_ms, stats.throughput, accuracy_of(judgement),
                 sidecar_path.name)
