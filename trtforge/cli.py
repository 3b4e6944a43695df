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
            err_console.print(f"[bold red]error:[/] {exc}")
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
    quiet: Annotated[bool, typer.Option(help="no progress bars")] = False,
) -> None:
    """Build an engine + sidecar from an ONNX file."""
    from trtforge.pipeline import compile as compile_model

    art = compile_model(
        model, precision=precision, batch=batch, targets=target or None, output_dir=output_dir, name=name,
        optimization_level=opt_level, workspace_bytes=workspace_mb * (1 << 20) if workspace_mb else None,
        calibration_data=calib, progress=not quiet,
    )
    console.print(f"[green]built[/] {art.engine_path} ({art.sidecar.engine_size / 1e6:.1f} MB, "
                  f"{art.sidecar.builder.get('build_seconds', 0):.1f} s) + {art.sidecar_path.name}")


def _shape(shape: Any) -> str:
    return "×".join("?" if d < 0 else str(d) for d in shape)


@app.command()
@user_errors
def inspect(path: Annotated[Path, typer.Argument(help="an .engine or its .json sidecar")]) -> None:
    """Print a sidecar as tables and check the engine's sha256 against it."""
    from trtforge.build.sidecar import EngineHashMismatch, read_sidecar
    from trtforge.build.targets import where_it_runs

    sc = read_sidecar(path)
    try:
        sc.verify_engine()
        verdict = "[green]sha256 OK[/]"
        ok = True
    except (EngineHashMismatch, FileNotFoundError) as exc:
        verdict = f"[red]{exc}[/]"
        ok = False
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
        raise typer.Exit(1)


@app.command()
@user_errors
def demo(
    output_dir: Annotated[Path, typer.Option("-o", "--output-dir")] = Path("trtforge_out"),
    crops: Annotated[int, typer.Option(help="photo crops for the agreement check")] = 128,
) -> None:
    """EfficientNet-Lite0 → FP32 and FP16 engines, checked on real photos; prints a table."""
    from trtforge.demo import run_demo

    run_demo(output_dir=output_dir, crops=crops, console=console)


def main() -> None:  # pragma: no cover - console entry
    app()
