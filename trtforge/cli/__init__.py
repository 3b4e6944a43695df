"""The ``trtforge`` command.

Example:
    $ trtforge build model.onnx --precision fp16 --batch 1:8:32 --target sm89 -o out/
    $ trtforge inspect out/model_fp16.json
    $ trtforge demo
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(no_args_is_help=True, add_completion=False, help="PyTorch/ONNX → TensorRT engines, run fast.")
console = Console(width=None if Console().is_terminal else 160)
err_console = Console(stderr=True)

#: Exceptions that mean "bad input": printed as one clear line, exit code 2, no traceback.
USER_ERRORS: tuple[type[BaseException], ...] = (
    ValueError, FileNotFoundError, FileExistsError, PermissionError, NotADirectoryError, TypeError, ImportError,
)


def user_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    """Turn user errors into a red message and exit code 2; Ctrl-C into exit code 130."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except USER_ERRORS as exc:
            err_console.print(f"[bold red]error:[/] {exc}", soft_wrap=True)
            raise typer.Exit(2) from exc
        except KeyboardInterrupt as exc:
            err_console.print(f"[yellow]cancelled:[/] {exc or 'interrupted'}")
            raise typer.Exit(130) from exc

    return wrapper


@app.command()
@user_errors
def build(
    model: Annotated[Path, typer.Argument(help="an .onnx file")],
    precision: Annotated[str, typer.Option(help="fp32 | fp16 | bf16 | int8")] = "fp16",
    batch: Annotated[str, typer.Option(help="N, min:opt:max, or several: 1:1:1,1:8:32")] = "1",
    target: Annotated[list[str] | None, typer.Option(help="compute capability, e.g. sm89 (repeatable)")] = None,
    output_dir: Annotated[Path, typer.Option("-o", "--output-dir")] = Path("trtforge_out"),
    name: Annotated[str | None, typer.Option(help="file-name stem (default: the model's)")] = None,
    opt_level: Annotated[int, typer.Option(help="builder optimization level 0..5")] = 3,
    workspace_mb: Annotated[int | None, typer.Option(help="workspace limit in MiB")] = None,
    calib: Annotated[Path | None, typer.Option(help="int8: calibration images folder or .npy")] = None,
    calibrator: Annotated[str, typer.Option(help="int8: mse | percentile | entropy | max")] = "mse",
    smoothquant: Annotated[float | None, typer.Option(help="int8: SmoothQuant alpha, e.g. 0.5 (off when absent)")] = None,
    bias_correction: Annotated[bool, typer.Option(help="int8: bias correction (kept only when it helps)")] = True,
    placement: Annotated[str, typer.Option(help="int8: default (rules) | auto (measured)")] = "default",
    error_budget: Annotated[float | None, typer.Option(help="int8 auto placement: limit in the task's metric "
                            "(classifier: softmax KL, e.g. 0.01; embedding: mean cosine, e.g. 0.99; other: "
                            "relative L2, e.g. 0.1); default: the task's")] = None,
    exclude: Annotated[list[str] | None, typer.Option(help="int8: keep layers matching this regex/op type in FP16")] = None,
    include: Annotated[list[str] | None, typer.Option(help="int8: force layers matching this regex/op type to INT8")] = None,
    preprocessing: Annotated[Path | None, typer.Option(help="JSON preprocessing (or a sidecar), for --calib images")] = None,
    quiet: Annotated[bool, typer.Option(help="no progress bars")] = False,
    cache: Annotated[bool, typer.Option(help="use the engine cache")] = True,
    cache_dir: Annotated[Path | None, typer.Option(help="engine cache folder")] = None,
    timing_cache: Annotated[Path | None, typer.Option(help="timing cache file (full TensorRT)")] = None,
    hardware_compatibility: Annotated[str | None, typer.Option(help="ampere_plus | same_compute_capability")] = None,
    version_compatible: Annotated[bool, typer.Option(help="embed the lean runtime (host code)")] = False,
    refittable: Annotated[bool, typer.Option(help="allow trtforge refit")] = False,
    strip_weights: Annotated[bool, typer.Option(help="weight-stripped plan (refit before use)")] = False,
) -> None:
    """Build an engine + sidecar from an ONNX file."""
    from trtforge.pipeline import compile as compile_model

    pp = _read_preprocessing(preprocessing)
    quant = None
    if precision == "int8":
        from trtforge.quantize.api import QuantConfig

        quant = QuantConfig(calibrator=calibrator, smoothquant=smoothquant, bias_correction=bias_correction,
                            placement=placement, error_budget=error_budget, exclude=tuple(exclude or ()),
                            include=tuple(include or ()), cache_dir=output_dir / "calib_cache")
    art = compile_model(
        model, precision=precision, batch=batch, targets=target or None, output_dir=output_dir, name=name,
        optimization_level=opt_level, workspace_bytes=workspace_mb * (1 << 20) if workspace_mb else None,
        calibration_data=calib, quant=quant, progress=not quiet,
        **({"preprocessing": pp} if pp is not None else {}), cache=cache, cache_dir=cache_dir, timing_cache=timing_cache,
        hardware_compatibility=hardware_compatibility, version_compatible=version_compatible,
        refittable=refittable, strip_weights=strip_weights,
    )
    console.print(f"[green]built[/] {art.engine_path} ({art.sidecar.engine_size / 1e6:.1f} MB, "
                  f"{art.sidecar.builder.get('build_seconds', 0):.1f} s) + {art.sidecar_path.name}")


def _shape(shape: Any) -> str:
    return "×".join("?" if d < 0 else str(d) for d in shape)


@app.command()
@user_errors
def inspect(path: Annotated[Path, typer.Argument(help="an .engine or its .json sidecar")]) -> None:
    """Print a sidecar as tables and check the engine's sha256 against it."""
    from trtforge.builder.targets import where_it_runs
    from trtforge.core.sidecar import EngineHashMismatch, read_sidecar

    sc = read_sidecar(path)
    try:
        sc.verify_engine()
        verdict = "[green]sha256 OK[/]"
        ok = True
    except (EngineHashMismatch, FileNotFoundError) as exc:
        verdict = "[red]sha256 MISMATCH (see below)[/]"
        ok = False
        problem = str(exc)
    summary = Table(title=f"{sc.name}  ({sc.path})", show_header=False)
    summary.add_row("engine", f"{sc.engine_file}  {sc.engine_size / 1e6:.2f} MB  {verdict}")
    summary.add_row("precision", f"{sc.precision.get('built')} (requested {sc.precision.get('requested')}); "
                    + ", ".join(f"{k}: {v}" for k, v in sc.precision.get("node_dtypes", {}).items()))
    b = sc.builder
    summary.add_row("builder", f"{b.get('flavour')} {b.get('version')}, opt level {b.get('optimization_level')}, "
                    f"built in {b.get('build_seconds', '?')} s")
    summary.add_row("runs on", where_it_runs(b))
    summary.add_row("source", f"{sc.source.get('kind')} → {sc.source.get('onnx_file')}")
    if sc.preprocessing:
        p = sc.preprocessing
        summary.add_row("preprocessing", f"resize {p.get('resize')} {p.get('interpolation')}, mean {p.get('mean')}, "
                        f"std {p.get('std')}, {p.get('channel_order')} {p.get('layout')}")
    if sc.quantization:
        q = sc.quantization
        summary.add_row("quantization", ", ".join(f"{k}={v}" for k, v in q.items() if not isinstance(v, (dict, list))))
    for note in sc.notes:
        summary.add_row("note", note)
    console.print(summary)
    io = Table(title="inputs and outputs")
    for col in ("", "name", "dtype", "shape"):
        io.add_column(col)
    for kind, specs in (("in", sc.inputs), ("out", sc.outputs)):
        for s in specs:
            io.add_row(kind, s.name, s.dtype, _shape(s.shape))
    console.print(io)
    if sc.profiles:
        prof = Table(title="optimization profiles")
        for col in ("#", "input", "min", "opt", "max"):
            prof.add_column(col)
        for i, profile in enumerate(sc.profiles):
            for name, triple in profile.items():
                prof.add_row(str(i), name, _shape(triple["min"]), _shape(triple["opt"]), _shape(triple["max"]))
        console.print(prof)
    if not ok:
        console.print(f"[bold red]error:[/] {problem}", soft_wrap=True)
        raise typer.Exit(1)


@app.command()
@user_errors
def demo(
    output_dir: Annotated[Path, typer.Option("-o", "--output-dir")] = Path("trtforge_out"),
    crops: Annotated[int, typer.Option(help="photo crops for the agreement check")] = 128,
) -> None:
    """EfficientNet-Lite0 → FP32 and FP16 engines, checked on real photos; prints a table."""
    from trtforge.cli.demo import run_demo

    run_demo(output_dir=output_dir, crops=crops, console=console)


cache_app = typer.Typer(no_args_is_help=True, help="The engine cache: ls | prune | clear.")
app.add_typer(cache_app, name="cache")
CacheDirOption = Annotated[Path | None, typer.Option("--cache-dir", help="default: $TRTFORGE_CACHE_DIR or "
                                                     "~/.cache/trtforge/engines")]


@cache_app.command("ls")
@user_errors
def cache_ls(cache_dir: CacheDirOption = None) -> None:
    """List entries: key, model, precision, targets, size and last use (most recent first)."""
    import datetime as dt

    from trtforge.cache.engine_cache import EngineCache

    cache = EngineCache(cache_dir)
    entries = cache.entries()
    table = Table(title=f"engine cache {cache.directory}  ({sum(e.size for e in entries) / 1e6:.1f} MB of "
                  f"{cache.max_bytes / 1e9:.1f} GB)")
    for col in ("key", "model", "precision", "targets", "MB", "last use"):
        table.add_column(col)
    for e in entries:
        when = dt.datetime.fromtimestamp(e.last_use).isoformat(sep=" ", timespec="seconds")
        table.add_row(e.key[:16], e.model, e.precision, e.targets, f"{e.size / 1e6:.2f}", when)
    console.print(table)


@cache_app.command("prune")
@user_errors
def cache_prune(
    cache_dir: CacheDirOption = None,
    max_mb: Annotated[float | None, typer.Option(help="evict least recently used entries down to this size")] = None,
    older_than_days: Annotated[float | None, typer.Option(help="remove entries unused for this many days")] = None,
) -> None:
    """Remove old entries and evict down to the size limit; tidy half-written leftovers."""
    from trtforge.cache.engine_cache import EngineCache

    cache = EngineCache(cache_dir)
    removed = cache.prune(max_bytes=int(max_mb * 1e6) if max_mb is not None else None,
                          older_than_s=older_than_days * 86400 if older_than_days is not None else None)
    console.print(f"pruned {len(removed)} entr{'y' if len(removed) == 1 else 'ies'} "
                  f"({sum(e.size for e in removed) / 1e6:.1f} MB) from {cache.directory}")


@cache_app.command("clear")
@user_errors
def cache_clear(cache_dir: CacheDirOption = None) -> None:
    """Remove every entry."""
    from trtforge.cache.engine_cache import EngineCache

    cache = EngineCache(cache_dir)
    console.print(f"cleared {cache.clear()} entries from {cache.directory}")


@app.command()
@user_errors
def refit(
    engine: Annotated[Path, typer.Argument(help="a refittable .engine (or its .json)")],
    weights: Annotated[Path, typer.Option(help="new weights: a .onnx, or a state_dict .pt")],
) -> None:
    """Refit new weights into an engine in place (atomically); its sidecar gets the new sha256."""
    from trtforge.refit import refit_engine

    report = refit_engine(engine, weights)
    console.print(f"[green]refitted[/] {report.engine} with {report.weights} weights from {report.source}; "
                  f"sha256 {report.old_sha256[:12]}… → {report.new_sha256[:12]}…")


@app.command()
@user_errors
def bench(
    target: Annotated[str, typer.Argument(help="an .engine/.json, or zoo:efficientnet_lite0 | zoo:detr_like")],
    route: Annotated[list[str] | None, typer.Option(help="route (repeatable): eager, fp16, cuda_graph, compiled, "
                                                        "onnxruntime, tensorrt")] = None,
    batch: Annotated[list[int] | None, typer.Option(help="batch size (repeatable)")] = None,
    warmup: Annotated[int, typer.Option(help="untimed calls first")] = 10,
    repeats: Annotated[int, typer.Option(help="timed calls")] = 100,
    device: Annotated[str | None, typer.Option(help="cuda, cuda:1, cpu (default: the GPU if any)")] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="write every number here")] = None,
    png_out: Annotated[Path | None, typer.Option("--png", help="write the plot here (needs matplotlib)")] = None,
    compile_preprocessing: Annotated[bool | None, typer.Option(
        "--compile-preprocessing/--no-compile-preprocessing",
        help="the cuda_graph route's predictor fuses its preprocessing with torch.compile "
             "(default: when it captures CUDA graphs, with Triton and a C compiler installed)")] = None,
) -> None:
    """Routes × batch sizes: model-only and end-to-end (predictor) latency, p50/p90/p99, throughput."""
    from trtforge.bench.routes import run_bench_command

    run_bench_command(target, route or ["eager", "fp16", "cuda_graph"], batch or [1, 8], warmup=warmup,
                      repeats=repeats, device=device, json_path=json_out, png_path=png_out, console=console,
                      compile_preprocessing=compile_preprocessing)


def main() -> None:  # pragma: no cover - console entry
    app()


def _read_preprocessing(path: Path | None) -> dict | None:
    """A preprocessing dict from a JSON file: a plain dict or a sidecar's ``preprocessing`` block."""
    if path is None:
        return None
    import json

    data = json.loads(Path(path).read_text())
    if not isinstance(data, dict):
        raise ValueError(f"{path} must hold a JSON object such as {{\"resize\": [224, 224], \"mean\": [...]}}")
    return data.get("preprocessing", data)


quantize_app = typer.Typer(no_args_is_help=True, help="INT8 analysis: sensitivity.")
app.add_typer(quantize_app, name="quantize")


@quantize_app.command("sensitivity")
@user_errors
def quantize_sensitivity(
    model: Annotated[Path, typer.Argument(help="an FP32 .onnx file")],
    data: Annotated[Path, typer.Option(help="calibration images folder, .npy, or .npz per input (20 % held back)")],
    preprocessing: Annotated[Path | None, typer.Option(help="JSON with the preprocessing (or a sidecar) for images")] = None,
    calibrator: Annotated[str, typer.Option(help="mse | percentile | entropy | max")] = "mse",
    top: Annotated[int | None, typer.Option(help="show only the N most harmful")] = None,
) -> None:
    """Quantize one layer (or block) at a time and rank them by the output error they cause."""
    import onnx

    from trtforge.quantize.api import QuantConfig
    from trtforge.quantize.sensitivity import print_sensitivity, sensitivity_table

    rows = sensitivity_table(onnx.load(str(model)), data, QuantConfig(calibrator=calibrator),
                             _read_preprocessing(preprocessing))
    print_sensitivity(rows, top)

from trtforge.cli.serve import register as _register_serve  # noqa: E402

_register_serve(app)
