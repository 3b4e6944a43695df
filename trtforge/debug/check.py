"""``trtforge check``: run an artifact through a route and judge it against its FP32 reference in ONNX Runtime.

The inputs come from the sidecar (photo crops for image models with a recorded preprocessing,
random values otherwise) or from an ``.npz``. The reference is the FP32 ONNX graph beside the
engine, in ONNX Runtime (``route="onnxruntime"``). The task (the sidecar's quantization report, else
detected from the graph) picks the metric; the candidate's precision picks the tolerance. Also
measured: the first call (context creation, JIT compilation), the steady-state latency and memory.

Before the TensorRT route loads real bindings, ``doctor``'s verdict says whether the engine can
run on this machine; when it cannot, ``CannotRunHere`` carries that one line.

Example:
    >>> report = check_artifact(Path("out/efficientnet_lite0_fp16.json"), route="cuda_graph", samples=32)
    >>> report.judgement.passed, report.judgement.outputs[0].top1
    (True, 1.0)
"""

from __future__ import annotations

import contextlib
import importlib.util
import resource
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from trtforge.builder.capability import SCHEME_OF_PRECISION
from trtforge.builder.progress import StepProgress
from trtforge.core.errors import MissingDependency, NotPermitted, Unsupported, spelled
from trtforge.core.metrics import batch_rows, join_runs
from trtforge.core.routes import ROUTE_PRECISION
from trtforge.core.sidecar import Sidecar, read_sidecar
from trtforge.debug.speedup import Speedup, fp16_baseline
from trtforge.debug.tolerances import Judgement, judge
from trtforge.measure.inputs import (
    batch_size,
    load_npz,
    make_inputs,
    refuse_bad_indices,
    split_batches,
    unbatched,
)
from trtforge.quantize.task import task_of_outputs

NEXT_STEP = ("find where it diverges: trtforge compare --layerwise {reference} {processed}")


class CannotRunHere(Unsupported):
    """The TensorRT route cannot run this engine on this machine; the message says what to do."""


@dataclass(frozen=True)
class Timing:
    """First call (ms), steady-state median (ms) and memory: device MiB taken (CUDA) or peak RSS MiB (CPU).

    ``first_call_cached_ms``: the first call of a second load that found the JIT runtime cache the
    first load stored (TensorRT route on TensorRT-RTX); None where the flavour has no runtime cache.
    """

    first_call_ms: float
    steady_ms: float
    memory_mib: float
    memory_kind: str
    first_call_cached_ms: float | None = None


@dataclass(frozen=True)
class CheckReport:
    """What ``check`` measured; ``hint`` is the next step when it failed."""

    name: str
    route: str
    device: str
    samples: int
    batch: int
    judgement: Judgement
    timing: Timing
    hint: str | None = None
    #: The engine's time against its FP16 build (TensorRT route, engines not built in FP16).
    speedup: Speedup | None = None
    evaluator: str | None = None  # what ran the graph when not the route itself (BF16: its emulation graph)
    reference: str = "ONNX Runtime FP32"  # what the outputs were judged against (direct path: the PyTorch model)

    @property
    def passed(self) -> bool:
        return self.judgement.passed


def artifact_task(sidecar: Sidecar, reference_onnx: Path) -> str:
    """The sidecar's recorded task (INT8 report), else the one the reference graph shows."""
    if sidecar.quantization is not None and sidecar.quantization.task:
        return sidecar.quantization.task
    from trtforge.passes.graph import load_ir
    from trtforge.quantize.task import detect_task

    return detect_task(load_ir(reference_onnx))


def to_numpy(outputs: dict[str, Any]) -> dict[str, np.ndarray]:
    """Route outputs (torch tensors, maybe views the next call overwrites) → numpy copies."""
    import torch

    arrays = {}
    for name, value in outputs.items():
        if isinstance(value, torch.Tensor):
            value = value.detach().float() if value.dtype == torch.bfloat16 else value.detach()
            arrays[name] = value.cpu().numpy().copy()
        else:
            arrays[name] = np.array(value, copy=True)
    return arrays


def run_batches(engine: Any, batches: list[dict[str, np.ndarray]], step: Callable[[], None] | None = None,
                first: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Every batch through ``engine`` (``first``: the first batch's outputs, already run); each output concatenated
    along the sample axis, or one row per batch where its dim 0 is not the batch (``core.metrics.join_runs``);
    ``step`` after each batch run here."""
    parts: dict[str, list[np.ndarray]] = {name: [value] for name, value in (first or {}).items()}
    for batch in batches[1:] if first is not None else batches:
        for name, value in to_numpy(engine(**batch)).items():
            parts.setdefault(name, []).append(value)
        if step is not None:
            step()
    rows = [batch_rows(batch) for batch in batches]
    return {name: join_runs(values, rows) for name, values in parts.items()}


def _ensure_runnable(sidecar: Sidecar) -> None:
    from trtforge.debug.doctor import artifact_verdict, gather_facts

    verdict = artifact_verdict(gather_facts(), sidecar.builder)
    if not verdict.runs:
        raise CannotRunHere(f"--route tensorrt: {sidecar.name} {verdict.line}")


def timed_first_call(engine: Any, batch: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], float]:
    """(outputs, milliseconds) of one synchronized call: on a fresh engine, the first call's cost."""
    import torch

    start = time.perf_counter()
    outputs = to_numpy(engine(**batch))  # the copy to the host synchronizes
    if torch.device(engine.device).type == "cuda":
        torch.cuda.synchronize(engine.device)
    return outputs, (time.perf_counter() - start) * 1000.0


def timed_run(engine: Any, batches: list[dict[str, np.ndarray]], repeats: int = 20,
              step: Callable[[], None] | None = None) -> tuple[dict, Timing]:
    """Run every batch, timing the first call and the steady state (on the first batch), with memory (``step``
    after each batch)."""
    import torch

    from trtforge.measure.timing import measure

    device = torch.device(engine.device)
    cuda = device.type == "cuda"
    free_before = torch.cuda.mem_get_info(device)[0] if cuda else 0
    first, first_ms = timed_first_call(engine, batches[0])
    if step is not None:
        step()
    outputs = run_batches(engine, batches, step, first=first)
    steady = measure(lambda: engine(**batches[0]), device, warmup=2, repeats=repeats).median_ms
    if cuda:
        memory, kind = (free_before - torch.cuda.mem_get_info(device)[0]) / 2**20, "device MiB taken"
    else:
        memory, kind = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "process peak RSS MiB"
    return outputs, Timing(first_ms, steady, memory, kind)


def _first_call_cached(open_engine: Any, batch: dict[str, np.ndarray]) -> float | None:
    """The first call's time of a fresh load that found a runtime cache; None when it found none."""
    from trtforge.runtime.protocol import RuntimeCachingEngine

    with open_engine() as engine:
        if not (isinstance(engine, RuntimeCachingEngine) and engine.runtime_cache_loaded):
            return None
        return timed_first_call(engine, batch)[1]


def check_artifact(
    path: Path, route: str = "tensorrt", device: Any = None, samples: int = 32, inputs: Path | None = None,
    limit: float | None = None, repeats: int = 20, compare_fp16: bool = True, progress: StepProgress | None = None,
    **options: Any,
) -> CheckReport:
    """Run the artifact at ``path`` through ``route`` and judge it against the FP32 reference in ONNX Runtime.

    ``options`` go to ``trtforge.load`` (e.g. ``bindings=`` for the TensorRT route's test double,
    ``model=`` for a PyTorch route). ``limit`` overrides the tolerance of the task's metric. On the
    TensorRT route, a quantized engine (INT8, FP8, weight-only) is also timed against its FP16 build (``compare_fp16``).
    ``progress`` shows a bar per stage (the reference's batches, the route's), counted per batch.
    """
    from trtforge.core.routes import ROUTE_NAMES
    from trtforge.runtime.load import load, route_options
    from trtforge.runtime.protocol import EmulatingEngine

    sidecar = read_sidecar(path)
    if route not in ROUTE_NAMES:
        raise Unsupported(f"--route {route}: choose one of {', '.join(ROUTE_NAMES)}")
    if route == "tensorrt" and "bindings" not in options:
        _ensure_runnable(sidecar)
    if importlib.util.find_spec("onnxruntime") is None:
        raise MissingDependency("check compares with the FP32 reference in ONNX Runtime, which is not installed: "
                                "pip install onnxruntime (or onnxruntime-gpu)")
    whole = unbatched(sidecar.inputs, sidecar.outputs)  # no sample axis: one call on one set of inputs
    arrays = load_npz(inputs, sidecar.inputs, batched=not whole) if inputs is not None else make_inputs(
        sidecar.inputs, sidecar.profiles, 1 if whole else samples, sidecar.preprocessing)
    if inputs is not None:
        refuse_bad_indices(arrays, [sidecar.path.parent / name for name in (sidecar.source.reference_onnx_file,
                                                                            sidecar.source.onnx_file) if name])
    count = 1 if whole else next(iter(arrays.values())).shape[0]
    batches = [arrays] if whole else split_batches(arrays, batch_size(sidecar.inputs, sidecar.profiles, count))
    load_options = route_options(route)  # the artifact's own precision, as serve's onnxruntime route runs it
    stage = progress.stage if progress is not None else (lambda description, total: None)
    expected, reference_onnx = _reference(sidecar, batches, options, stage("FP32 reference", len(batches)))
    with contextlib.ExitStack() as stack:
        if route == "tensorrt":  # first call without, then with, the runtime cache the first load stores
            from trtforge.cache.runtime_cache import RuntimeCacheStore

            store = RuntimeCacheStore(stack.enter_context(tempfile.TemporaryDirectory(prefix="trtforge-check-")))
            load_options["runtime_cache"] = store
        with _candidate(sidecar, route, device, load_options, options) as engine:
            outputs, timing = timed_run(engine, batches, repeats, stage(f"route {route}", len(batches)))
            evaluator = engine.evaluator if isinstance(engine, EmulatingEngine) else None
            precision = ROUTE_PRECISION.get(route) or sidecar.precision.built  # the route's, else the engine's own
            device_name = str(engine.device)
        if route == "tensorrt":
            timing = replace(timing, first_call_cached_ms=_first_call_cached(
                lambda: load(sidecar.path, route=route, device=device, **load_options, **options), batches[0]))
        speedup = None
        if route == "tensorrt" and compare_fp16 and sidecar.precision.built in SCHEME_OF_PRECISION:  # quantized
            baseline, built = fp16_baseline(sidecar, stack)
            with load(baseline, route=route, device=device, **options) as fp16:
                base_timing = timed_run(fp16, batches[:1], repeats)[1]
            speedup = Speedup(str(baseline), base_timing.steady_ms, timing.steady_ms, sidecar.precision.built, built)
    task = artifact_task(sidecar, reference_onnx) if reference_onnx is not None else task_of_outputs(
        list(batches[0].values()), list(expected.values()))
    judgement = judge(expected, outputs, task=task, precision=precision or "fp32", limit=limit)
    hint = None
    if not judgement.passed and reference_onnx is not None:
        processed = sidecar.path.parent / (sidecar.source.onnx_file or "PROCESSED.onnx")
        hint = NEXT_STEP.format(reference=reference_onnx, processed=processed)
    batch = 1 if whole else batches[0][sidecar.inputs[0].name].shape[0]
    return CheckReport(sidecar.name, route, device_name, count, batch, judgement, timing, hint, speedup, evaluator,
                       "ONNX Runtime FP32" if reference_onnx is not None else "PyTorch FP32")


def _reference(sidecar: Sidecar, batches: list[dict[str, np.ndarray]], options: dict,
               step: Callable[[], None] | None = None) -> tuple[dict, Path | None]:
    """The FP32 reference's outputs and its ONNX file: the reference graph in ONNX Runtime, or for a direct-path
    artifact (no ONNX) the PyTorch model in FP32 on the CPU, ``model=`` (``--model``) or a trusted factory."""
    from trtforge.runtime.load import TRUSTED_FACTORY_PREFIXES, load

    if sidecar.source.path != "direct":
        with load(sidecar.path, route="onnxruntime") as reference:
            return run_batches(reference, batches, step), reference.onnx_path
    factory = sidecar.source.factory or "package.module:function"
    trusted = options.get("trust_factory") or factory.startswith(TRUSTED_FACTORY_PREFIXES)
    if options.get("model") is None and not trusted:
        raise NotPermitted(
            f"{sidecar.path} was built on the direct path: its FP32 reference is the PyTorch model, which trtforge "
            "imports only when told to; " + spelled(
                cli=f"pass --model {factory} (the factory that builds it)",
                python=f"pass model=<the nn.Module>, or trust_factory=True to import {factory}"))
    model_options = {k: options[k] for k in ("model", "trust_factory") if k in options}
    with load(sidecar.path, route="eager", device="cpu", **model_options) as reference:
        return run_batches(reference, batches, step), None


def _candidate(sidecar: Sidecar, route: str, device: Any, load_options: dict, options: dict) -> Any:
    """The engine under test: the route's (on the onnxruntime route a BF16 processed graph runs as its
    emulation graph, ``core.bf16_emulation``: ONNX Runtime's CPU provider has no BF16 Conv or MatMul)."""
    from trtforge.runtime.load import load

    return load(sidecar.path, route=route, device=device, **load_options, **options)
