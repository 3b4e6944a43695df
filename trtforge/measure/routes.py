"""Route benchmark: routes × batch sizes, model-only and end-to-end (predictor) latency, side by side.

For every (model, route, batch): one engine per route, a correctness check against the eager
FP32 model on the same input, model-only latency (a device-resident input), and end-to-end
latency of the predictor from ``batch`` HWC uint8 frames on the host to results on the host.
Preprocessing alone is timed too: PIL/NumPy on the CPU against the GPU path.

Example:
    >>> result = run_route_bench([zoo_bench_model("efficientnet_lite0")], ["eager", "cuda_graph"], [1, 8])
    >>> console.print(result.table()); result.save_json("bench.json"); result.save_plot("bench.png")
"""

from __future__ import annotations

import gc
import json
import platform
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trtforge.core.atomic import atomic_write_bytes
from trtforge.core.errors import InvalidArgument
from trtforge.core.preprocessing import PreprocessConfig
from trtforge.core.routes import ENGINE_ROUTES, ROUTE_NAMES
from trtforge.core.specs import TensorSpec
from trtforge.measure.timing import LatencyStats, measure, measure_interleaved, settle_compile_workers
from trtforge.runtime.protocol import Engine
from trtforge.vision.predictor import Predictor
from trtforge.vision.preprocess import Preprocessor
from trtforge.zoo.detr_like import DETR_LIKE_PREPROCESSING
from trtforge.zoo.efficientnet_lite import LITE0_PREPROCESSING


@dataclass(frozen=True)
class BenchModel:
    """A model the benchmark can open on any route."""

    name: str
    open: Callable[[str, Any], Engine]  # (route, device) -> Engine
    inputs: tuple[TensorSpec, ...]
    preprocessing: PreprocessConfig
    task: str
    profiles: tuple[dict[str, Any], ...] = ()  # a built engine's optimization profiles (the batches it takes)
    #: the FP32 reference each route is checked against (None: the eager route of ``open``)
    open_reference: Callable[[Any], Engine] | None = None


@dataclass(frozen=True)
class ZooBenchSpec:
    """A zoo model the benchmarks run: its factory, I/O (-1 is the batch axis), task and preprocessing."""

    factory: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    task: str
    preprocessing: dict[str, Any]


#: The zoo models the benchmarks run, by name.
ZOO_BENCH_MODELS: dict[str, ZooBenchSpec] = {
    "efficientnet_lite0": ZooBenchSpec(
        "trtforge.zoo:efficientnet_lite0", (TensorSpec("images", "float32", (-1, 3, 224, 224)),),
        (TensorSpec("logits", "float32", (-1, 1000)),), "classification", LITE0_PREPROCESSING),
    "detr_like": ZooBenchSpec(
        "trtforge.zoo.detr_like:detr_like", (TensorSpec("images", "float32", (-1, 3, 640, 640)),),
        (TensorSpec("logits", "float32", (-1, 300, 80)), TensorSpec("boxes", "float32", (-1, 300, 4))),
        "detection", DETR_LIKE_PREPROCESSING),
}


def zoo_bench_model(name: str, compile_mode: str = "max-autotune") -> BenchModel:
    """``efficientnet_lite0`` (real weights) or ``detr_like`` (random weights), on the PyTorch routes."""
    from trtforge.runtime.load import model_from_factory
    from trtforge.runtime.torch_routes import TorchEngine

    if name not in ZOO_BENCH_MODELS:
        raise InvalidArgument(f"unknown zoo model {name!r}; choose one of {tuple(ZOO_BENCH_MODELS)}")
    spec = ZOO_BENCH_MODELS[name]
    model = model_from_factory(spec.factory)

    def open_route(route: str, device: Any) -> Engine:
        return TorchEngine(model, spec.inputs, spec.outputs, route=route, device=device, compile_mode=compile_mode)

    return BenchModel(name, open_route, spec.inputs, PreprocessConfig.of(spec.preprocessing), spec.task)


def write_zoo_sidecar(folder: Path, name: str) -> Path:
    """The sidecar of a zoo model, beside a placeholder engine file, for ``trtforge.load`` on the PyTorch routes.

    Only the ``tensorrt`` route reads the engine bytes; the others rebuild the model from the
    sidecar's factory. Writing it builds no model.

    Example:
        >>> trtforge.load(write_zoo_sidecar(Path(tmp), "efficientnet_lite0"), route="cuda_graph")
    """
    from trtforge.core.hashing import sha256_file
    from trtforge.core.sidecar import Sidecar, write_sidecar

    spec = ZOO_BENCH_MODELS[name]
    engine_file = folder / f"{name}_fp16.engine"
    engine_file.write_bytes(b"placeholder: the PyTorch routes never read the engine")
    sidecar = Sidecar(
        name=f"{name}_fp16", engine_file=engine_file.name, engine_size=engine_file.stat().st_size,
        engine_sha256=sha256_file(engine_file), inputs=spec.inputs, outputs=spec.outputs, profiles=(),
        precision={"built": "fp16"}, builder={}, source={"kind": "torch", "factory": spec.factory},
        preprocessing=dict(spec.preprocessing),
    )
    return write_sidecar(folder / f"{name}_fp16.json", sidecar)


def sidecar_bench_model(path: str | Path) -> BenchModel:
    """A built engine (its sidecar), opened with ``trtforge.load`` on each route."""
    from trtforge.core.sidecar import read_sidecar
    from trtforge.runtime.load import load, route_options

    sidecar = read_sidecar(Path(path))  # no preprocessing record: model-only rows (no end-to-end timing)
    task = "detection" if len(sidecar.outputs) >= 2 else "classification"

    def open_route(route: str, device: Any, reference: bool = False) -> Engine:
        if route == "onnxruntime" and torch.device(device).type == "cuda":
            import onnxruntime as ort

            if "CUDAExecutionProvider" not in ort.get_available_providers():
                device = "cpu"  # the reference route runs where ONNX Runtime can
        # a route runs the artifact at its own precision, as check and serve do; the reference is the FP32 graph
        return load(path, route=route, device=device, **({} if reference else route_options(route)))

    def open_reference(device: Any) -> Engine:
        try:
            return open_route("eager", device, reference=True)
        except ValueError:  # no PyTorch model behind this engine: the FP32 reference graph in ONNX Runtime
            return open_route("onnxruntime", device, reference=True)

    return BenchModel(sidecar.name, open_route, sidecar.inputs, sidecar.preprocessing, task, tuple(sidecar.profiles),
                      open_reference)


def machine_info() -> dict[str, Any]:
    """GPU name, driver, torch and CUDA versions, CPU: what a benchmark record must name."""
    info: dict[str, Any] = {
        "torch": torch.__version__, "python": platform.python_version(), "cpu": platform.processor() or platform.machine(),
        "date_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
        info["cuda"] = torch.version.cuda
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=20, check=True)
            info["driver"] = out.stdout.strip().splitlines()[0]
        except (OSError, subprocess.SubprocessError, IndexError) as exc:
            info["driver"] = f"unknown ({type(exc).__name__})"
    else:
        info["gpu"] = None
    return info


def example_input(spec: TensorSpec, batch: int, device: Any, seed: int = 0) -> torch.Tensor:
    """One input at ``batch`` (its dim 0 where that is dynamic), seeded, on ``device``: ``example_inputs``' rule for a
    single tensor (the bench scripts' image input)."""
    from trtforge.measure.inputs import make_inputs

    return torch.from_numpy(np.ascontiguousarray(make_inputs((spec,), (), batch, seed=seed)[spec.name])).to(device)


def example_inputs(bench_model: BenchModel, batch: int, device: Any, seed: int = 0) -> dict[str, torch.Tensor]:
    """Every input of ``bench_model`` at ``batch``, seeded, on ``device``: ``check``'s rule for made inputs
    (``measure.inputs.make_inputs``: standard normal floats, 0/1 integer ids and masks; dims the profiles fix)."""
    from trtforge.measure.inputs import make_inputs

    arrays = make_inputs(bench_model.inputs, bench_model.profiles, batch, seed=seed)
    return {name: torch.from_numpy(np.ascontiguousarray(a)).to(device) for name, a in arrays.items()}


def feed_batch(feed: dict[str, torch.Tensor]) -> int:
    """The batch of one call's inputs: dim 0 of the first input that has one (1: no inputs, or scalars)."""
    return next((int(v.shape[0]) for v in feed.values() if v.dim()), 1)


def bench_batches(model: BenchModel, batches: Sequence[int] | None) -> list[int]:
    """The batch sizes to time: ``batches`` when the model takes each (else one line naming what it takes), or
    by default those of 1 and 8 it takes (its own batch when it takes neither)."""
    from trtforge.core.errors import spelled
    from trtforge.measure.inputs import batch_range

    span = batch_range(model.inputs, model.profiles)
    if batches is None:
        low, high = span or (1, 8)
        return [b for b in (1, 8) if low <= b <= high] or [low]
    if any(b < 1 for b in batches):
        raise InvalidArgument(f"batch sizes must be ≥ 1, got {list(batches)}")
    outside = [b for b in batches if span is not None and not span[0] <= b <= span[1]]
    if outside:
        takes = f"batch {span[0]} only" if span[0] == span[1] else f"batches {span[0]} to {span[1]}"
        fix = spelled(cli=f"--batch {span[0]}", python=f"batches=[{span[0]}]")
        more = spelled(cli="build --dynamic-batch --batch MIN:OPT:MAX",
                       python="compile(..., dynamic_batch=True, batch='MIN:OPT:MAX')")
        raise InvalidArgument(f"batch {', '.join(map(str, outside))}: {model.name} takes {takes} (its inputs' dim 0 "
                              f"and its profiles); bench it with {fix}, or build it for more ({more}, "
                              "docs/batching.md)")
    return list(batches)


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    out, ref = out.detach().double().cpu(), ref.detach().double().cpu()
    if not torch.isfinite(out).all():
        return float("nan")
    return float((out - ref).norm() / ref.norm().clamp_min(1e-30))


@dataclass
class BenchResult:
    """Rows (one per model × route × batch × kind), checks, machine, and derived ratios."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    checks: list[dict[str, Any]] = field(default_factory=list)
    machine: dict[str, Any] = field(default_factory=machine_info)
    config: dict[str, Any] = field(default_factory=dict)

    def add(self, model: str, route: str, batch: int, kind: str, stats: LatencyStats, **extra: Any) -> None:
        self.rows.append({"model": model, "route": route, "batch": batch, "kind": kind, **stats.as_dict(), **extra})

    def add_failure(self, model: str, route: str, error: BaseException) -> None:
        """A route that failed: one row saying why; the rows measured before it stay."""
        message = " ".join(str(error).split()) or type(error).__name__
        self.rows.append({"model": model, "route": route, "batch": None, "kind": "failed",
                          "error": f"{type(error).__name__}: {message}"})

    def _median(self, model: str, route: str, batch: int, kind: str) -> float | None:
        for row in self.rows:
            if (row["model"], row["route"], row["batch"], row["kind"]) == (model, route, batch, kind):
                return row["median_ms"]
        return None

    def summary(self) -> dict[str, Any]:
        """End-to-end / model-only per case; speedup of each route over eager; preprocessing speedup."""
        ratios, pinned, resident, speedups, pre = [], [], [], [], {}
        cases = sorted({(r["model"], r["route"], r["batch"]) for r in self.rows if r["kind"] == "model"},
                       key=lambda c: (c[0], c[2], c[1]))
        for model, route, batch in cases:
            m = self._median(model, route, batch, "model")
            e = self._median(model, route, batch, "end_to_end")
            eager = self._median(model, "eager", batch, "model")
            p = self._median(model, route, batch, "end_to_end_pinned")
            g = self._median(model, route, batch, "end_to_end_device")
            if m and g:
                resident.append({"model": model, "route": route, "batch": batch, "end_to_end_device_over_model": g / m})
            if m and e:
                ratios.append({"model": model, "route": route, "batch": batch, "end_to_end_over_model": e / m})
            if m and p:
                pinned.append({"model": model, "route": route, "batch": batch, "end_to_end_pinned_over_model": p / m})
            if m and eager:
                speedups.append({"model": model, "route": route, "batch": batch, "speedup_over_eager_fp32": eager / m})
        for row in self.rows:
            if row["kind"].startswith("preprocess"):
                pre[f"{row['model']}:{row['route']}"] = row["median_ms"]
        return {"end_to_end_over_model": ratios, "end_to_end_pinned_over_model": pinned,
                "end_to_end_device_over_model": resident,
                "speedup_over_eager": speedups, "preprocess_ms": pre}

    def to_dict(self) -> dict[str, Any]:
        return {"machine": self.machine, "config": self.config, "rows": self.rows, "checks": self.checks,
                "summary": self.summary()}

    def save_json(self, path: str | Path) -> Path:
        path = Path(path)
        atomic_write_bytes(path, (json.dumps(self.to_dict(), indent=2) + "\n").encode())
        return path

    def table(self):
        """A rich table: one line per model × route × batch."""
        from rich.markup import escape
        from rich.table import Table

        table = Table(title=f"trtforge routes on {self.machine.get('gpu') or 'CPU'}")
        for column in ("model", "route", "batch", "model ms (p50/p90/p99)", "img/s", "end-to-end ms (p50/p90/p99)",
                       "e2e/model", "e2e pinned ms (p50/p90/p99)", "pinned/model", "× eager", "check"):
            table.add_column(column, justify="left" if column in ("model", "route") else "right")
        model_rows = [r for r in self.rows if r["kind"] == "model"]
        for row in model_rows:
            key = (row["model"], row["route"], row["batch"])
            e2e = next((r for r in self.rows if r["kind"] == "end_to_end" and (r["model"], r["route"], r["batch"]) == key), None)
            pin = next((r for r in self.rows if r["kind"] == "end_to_end_pinned"
                        and (r["model"], r["route"], r["batch"]) == key), None)
            eager = self._median(row["model"], "eager", row["batch"], "model")
            check = next((c for c in self.checks if (c["model"], c["route"], c["batch"]) == key), None)
            table.add_row(
                row["model"], row["route"], str(row["batch"]),
                f"{row['median_ms']:.3f} / {row['p90_ms']:.3f} / {row['p99_ms']:.3f}", f"{row['throughput']:.0f}",
                f"{e2e['median_ms']:.3f} / {e2e['p90_ms']:.3f} / {e2e['p99_ms']:.3f}" if e2e else "-",
                f"{e2e['median_ms'] / row['median_ms']:.2f}" if e2e else "-",
                f"{pin['median_ms']:.3f} / {pin['p90_ms']:.3f} / {pin['p99_ms']:.3f}" if pin else "-",
                f"{pin['median_ms'] / row['median_ms']:.2f}" if pin else "-",
                f"{eager / row['median_ms']:.2f}" if eager else "-",
                ("ok" if check["ok"] else "FAIL") + f" ({check['rel_error']:.1e})" if check else "-",
            )
        for row in self.rows:
            if row["kind"].startswith("preprocess"):
                table.add_row(row["model"], row["route"], str(row["batch"]),
                              f"{row['median_ms']:.3f} / {row['p90_ms']:.3f} / {row['p99_ms']:.3f}", "", "", "", "", "",
                              "", "preprocessing only")
            elif row["kind"] == "failed":
                table.add_row(escape(row["model"]), escape(row["route"]), "-", "", "", "", "", "", "", "",
                              escape(f"FAILED: {row['error']}"))
        return table

    def save_plot(self, path: str | Path) -> Path:
        """Grouped bars per model: model-only and end-to-end median latency per route and batch."""
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError as exc:
            raise ImportError("the PNG plot needs matplotlib: pip install 'trtforge[bench]'") from exc
        models = sorted({r["model"] for r in self.rows if r["kind"] == "model"})
        fig, axes = plt.subplots(1, max(len(models), 1), figsize=(7 * max(len(models), 1), 4.5), squeeze=False)
        for ax, model in zip(axes[0], models, strict=False):
            cases = [r for r in self.rows if r["model"] == model and r["kind"] == "model"]
            labels = [f"{r['route'].replace('(', chr(10) + '(')}\nb{r['batch']}" for r in cases]
            xs = np.arange(len(cases))
            ax.bar(xs - 0.27, [r["median_ms"] for r in cases], 0.27, label="model only")
            ax.bar(xs, [self._median(model, r["route"], r["batch"], "end_to_end") or 0 for r in cases], 0.27,
                   label="end to end, frame in pageable numpy")
            ax.bar(xs + 0.27, [self._median(model, r["route"], r["batch"], "end_to_end_pinned") or 0 for r in cases],
                   0.27, label="end to end, frame in pinned buffer")
            ax.set_xticks(xs, labels, fontsize=8)
            ax.set_yscale("log")
            ax.set_ylabel("median latency, ms (log)")
            ax.set_title(model)
            ax.legend(fontsize=8)
        fig.suptitle(f"trtforge routes, {self.machine.get('gpu') or 'CPU'}, torch {self.machine.get('torch')}")
        fig.tight_layout()
        path = Path(path)
        fig.savefig(path, dpi=110)
        plt.close(fig)
        return path


def _free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()


def run_route_bench(
    models: Sequence[BenchModel],
    routes: Sequence[str],
    batches: Sequence[int],
    *,
    device: Any = None,
    image: np.ndarray | None = None,
    warmup: int = 10,
    repeats: int = 100,
    result: BenchResult | None = None,
    on_progress: Callable[[str], None] | None = None,
    on_row: Callable[[BenchResult], None] | None = None,
    route_labels: dict[str, str] | None = None,
    compile_preprocessing: bool | None = None,
) -> BenchResult:
    """Time every model × route × batch (model-only and end-to-end); check each against eager FP32.

    ``compile_preprocessing`` is passed to the predictor on the ``cuda_graph`` route (``None``:
    the predictor's default, ``fuse_preprocessing_by_default``).
    """
    from trtforge.runtime.placement import default_device

    device = default_device(device)
    if image is None:
        image = np.random.default_rng(0).integers(0, 256, (720, 1280, 3), dtype=np.uint8)
    result = result or BenchResult()
    # Several calls may share one result (routes_gpu runs "compiled" last): the routes accumulate.
    earlier = [r for r in result.config.get("routes", []) if r not in routes]
    result.config.update({"routes": [*earlier, *routes], "batches": list(batches), "warmup": warmup,
                          "repeats": repeats, "image": list(image.shape), "device": str(device),
                          "warmup_note": "timed after each predictor's first call and past Inductor's compile-pool "
                                         "start-up (settle_compile_workers; each row's compile_pool says what it did)"})
    say = on_progress or (lambda _msg: None)
    labels = route_labels or {}
    for bench_model in models:
        references = _references(bench_model, batches, device, say)
        for route in routes:
            try:
                _bench_route(bench_model, route, labels.get(route, route), batches, device, image, references,
                             result, say=say, on_row=on_row, compile_preprocessing=compile_preprocessing,
                             warmup=warmup, repeats=repeats)
            except Exception as exc:  # noqa: BLE001 - a failing route is a row of the report, not the end of the run
                say(f"{bench_model.name} / {route}: failed ({type(exc).__name__}: {exc})")
                result.add_failure(bench_model.name, labels.get(route, route), exc)
    return result


def _bench_route(bench_model: BenchModel, route: str, label: str, batches: Sequence[int], device: torch.device,
                 image: np.ndarray, references: dict[int, dict] | None, result: BenchResult, *,
                 say: Callable[[str], None], on_row: Callable[[BenchResult], None] | None,
                 compile_preprocessing: bool | None, warmup: int, repeats: int) -> None:
    """One route of one model: every batch, checked against the reference, then timed."""
    say(f"{bench_model.name} / {route}: opening")
    engine = bench_model.open(route, device)
    try:
        for batch in batches:
            x = example_inputs(bench_model, batch, engine.device)
            first_call_s = (_check_against_reference(bench_model, engine, route, label, x, references[batch], result)
                            if references is not None else 0.0)
            say(f"{bench_model.name} / {route} / b{batch}: model only and end to end, side by side "
                f"(first call {first_call_s:.1f}s)")
            fuse = compile_preprocessing if route == "cuda_graph" else False
            _time_model_and_predictor(bench_model, engine, label, x, image, result, fuse=fuse,
                                      warmup=warmup, repeats=repeats)
            if on_row is not None:
                on_row(result)
    finally:
        engine.close()
        _free(device)


def _references(bench_model: BenchModel, batches: Sequence[int], device: torch.device,
                say: Callable[[str], None] = lambda _msg: None) -> dict[int, dict] | None:
    """Eager FP32 outputs per batch (ONNX Runtime's when no PyTorch model is behind the engine); None
    (rows without checks) when neither route opens."""
    try:
        reference_engine = (bench_model.open_reference or (lambda d: bench_model.open("eager", d)))(device)
    except (ValueError, OSError, ImportError) as exc:
        say(f"{bench_model.name}: no reference route opens ({exc}); timing without accuracy checks")
        return None
    references = {}
    with reference_engine as eager:
        for batch in batches:
            references[batch] = {k: v.clone() for k, v in eager(**example_inputs(bench_model, batch, eager.device)).items()}
    _free(device)
    return references


def _check_against_reference(bench_model: BenchModel, engine: Engine, route: str, label: str, x: dict[str, torch.Tensor],
                             reference: dict, result: BenchResult) -> float:
    """The first call, checked against the reference into ``result.checks``; returns its seconds."""
    t0 = time.perf_counter()
    first = {k: v.clone() for k, v in engine(**x).items()}
    first_call_s = time.perf_counter() - t0
    name = next(iter(first))
    error = relative_error(first[name], reference[name])
    agree = None
    if bench_model.task == "classification":
        agree = float((first[name].argmax(-1).cpu() == reference[name].argmax(-1).cpu()).float().mean())
    # FP16 routes: relative error under 3e-2; top-1 agreement on random inputs is reported.
    ok = bool(error < (1e-4 if route == "eager" else 3e-2))
    result.checks.append({"model": bench_model.name, "route": label, "batch": feed_batch(x), "output": name,
                          "rel_error": error, "top1_agreement": agree, "ok": ok, "first_call_s": first_call_s})
    return first_call_s


def _time_model_and_predictor(bench_model: BenchModel, engine: Engine, label: str, x: dict[str, torch.Tensor],
                              image: np.ndarray, result: BenchResult, *, fuse: bool | None, warmup: int,
                              repeats: int) -> None:
    """The model alone and the predictor end to end (pageable, pinned, on-device frames), interleaved."""
    batch = feed_batch(x)
    if not bench_model.preprocessing:  # no preprocessing record: the model alone
        stats = measure_interleaved({"model": lambda x=x, e=engine: e(**x)}, engine.device, warmup=warmup,
                                    repeats=repeats, batch=batch)
        result.add(bench_model.name, label, batch, "model", stats["model"], interleaved=True)
        return
    with Predictor(engine, bench_model.preprocessing, task=bench_model.task,
                   compile_preprocessing=fuse) as predictor:
        calls = {"model": lambda x=x, e=engine: e(**x), "end_to_end": lambda f=[image] * batch: predictor(f)}
        # Frames decoded straight into the predictor's pinned buffer: no host memcpy.
        buffer = predictor.frame_buffer(batch, *image.shape[:2])
        buffer[...] = image
        calls["end_to_end_pinned"] = lambda f=[buffer[i] for i in range(batch)]: predictor(f)
        # The first call captures the graph (and compiles the preprocessing when fused).
        t0 = time.perf_counter()
        calls["end_to_end_pinned"]()
        predictor_first_call_s = time.perf_counter() - t0
        compile_pool = settle_compile_workers()  # timings start past any compile-pool start-up
        if engine.device.type == "cuda":  # frames already on the GPU (e.g. from NVDEC)
            resident = [torch.from_numpy(image).to(engine.device) for _ in range(batch)]
            calls["end_to_end_device"] = lambda f=resident: predictor(f)
        stats = measure_interleaved(calls, engine.device, warmup=warmup, repeats=repeats, batch=batch)
        for kind, st in stats.items():
            extra = {} if kind == "model" else {"predictor_cuda_graph": predictor.cuda_graph,
                                                "compile_preprocessing": predictor.compile_preprocessing,
                                                "predictor_first_call_s": predictor_first_call_s,
                                                "compile_pool": compile_pool}
            result.add(bench_model.name, label, batch, kind, st, interleaved=True, **extra)


def start_bench_script(out: Path, argv: Sequence[str]) -> tuple[torch.device, BenchResult]:
    """What every ``bench/*_gpu.py`` does first: make ``out``, take the GPU if there is one (cuDNN
    autotuning on), and start a result that records the command line and the machine.

    Example:
        >>> device, result = start_bench_script(args.out, sys.argv)
    """
    out.mkdir(parents=True, exist_ok=True)
    device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    torch.backends.cudnn.benchmark = True
    result = BenchResult()
    result.config["command"] = " ".join(["python", *argv])
    return device, result


def bench_preprocessing(
    image: np.ndarray, preprocessing: dict[str, Any], *, device: Any = None, warmup: int = 10, repeats: int = 100,
    model: str = "preprocess", result: BenchResult | None = None,
) -> BenchResult:
    """PIL resize + NumPy normalise (CPU) against the GPU path, for one HWC uint8 frame."""
    from PIL import Image

    from trtforge.runtime.placement import default_device

    device = default_device(device)
    result = result or BenchResult()
    config = PreprocessConfig.of(preprocessing)
    mean, std = np.asarray(config.mean, np.float32), np.asarray(config.std, np.float32)
    resample = Image.BILINEAR if config.interpolation == "bilinear" else Image.BICUBIC

    def pil_numpy() -> np.ndarray:
        resized = np.asarray(Image.fromarray(image).resize(config.size[::-1], resample), np.float32)
        return np.ascontiguousarray(((resized * config.scale - mean) / std).transpose(2, 0, 1)[None])

    result.add(model, "preprocess_pil_numpy", 1, "preprocess_cpu",
               measure(pil_numpy, torch.device("cpu"), warmup=warmup, repeats=repeats))
    pre = Preprocessor(config, device)
    result.add(model, "preprocess_gpu_from_host", 1, "preprocess_gpu",
               measure(lambda: pre([image]), device, warmup=warmup, repeats=repeats))
    resident = pre.upload([image]).clone()
    result.add(model, "preprocess_gpu_resident", 1, "preprocess_gpu",
               measure(lambda: pre.transform(resident), device, warmup=warmup, repeats=repeats))
    return result


def open_bench_target(target: str) -> BenchModel:
    """``zoo:efficientnet_lite0``, ``zoo:detr_like``, or the path of an engine / sidecar."""
    if target.startswith("zoo:"):
        return zoo_bench_model(target.removeprefix("zoo:"))
    return sidecar_bench_model(Path(target))


def run_bench_command(
    target: str, routes: Sequence[str], batches: Sequence[int] | None, *, warmup: int = 10, repeats: int = 100,
    device: Any = None, json_path: str | Path | None = None, png_path: str | Path | None = None, console: Any = None,
    compile_preprocessing: bool | None = None,
) -> BenchResult:
    """What ``trtforge bench`` does: time, print the table, write JSON and PNG when asked (``batches`` None: those
    of 1 and 8 the model takes)."""
    from rich.console import Console

    unknown = [r for r in routes if r not in ROUTE_NAMES]
    if unknown:
        raise InvalidArgument(f"unknown route(s) {unknown}; choose from {ROUTE_NAMES}")
    console = console or Console()
    model = open_bench_target(target)
    batches = bench_batches(model, batches)
    if target.startswith("zoo:") and set(ENGINE_ROUTES) & set(routes):
        raise InvalidArgument(f"zoo targets run the PyTorch routes only; give an engine path for "
                              f"{'/'.join(ENGINE_ROUTES)}")
    result = run_route_bench([model], routes, batches, device=device, warmup=warmup, repeats=repeats,
                             on_progress=console.log, compile_preprocessing=compile_preprocessing)
    result.config["command"] = f"trtforge bench {target} " + " ".join(f"--route {r}" for r in routes)
    console.print(result.table())
    if json_path is not None:
        console.print(f"wrote {result.save_json(json_path)}")
    if png_path is not None:
        console.print(f"wrote {result.save_plot(png_path)}")
    return result
