"""``trtforge tune``: measure the deployments this device accelerates on your data and choose the fastest one that
keeps the accuracy; the choice goes into the artifact's sidecar (``tuned``), which ``--route auto`` uses.

Example:
    $ trtforge tune model.onnx --data data.npz -o tuned/ --max-minutes 10 --min-accuracy 0.99 --json tune.json
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from trtforge.cli.app import app, console, guarded, say_warning
from trtforge.core.config import PRECISIONS
from trtforge.core.routes import ROUTE_NAMES


@app.command()
@guarded
def tune(
    target: Annotated[str, typer.Argument(help=(
        "an .onnx file, an artifact's .json (its FP32 graph; its zoo model for the PyTorch routes), zoo:NAME or "
        "package.module:function"))],
    data: Annotated[Path, typer.Option(help=".npz with one array per model input, samples along axis 0")],
    output_dir: Annotated[Path, typer.Option("-o", "--output-dir", help="the artifacts, the points and the plot")] = Path(
        "trtforge_tuned"),
    max_minutes: Annotated[float, typer.Option(help="time budget; what it cuts is listed")] = 10.0,
    max_p99_ms: Annotated[float | None, typer.Option(help="keep points whose p99 latency is at most this")] = None,
    min_accuracy: Annotated[float | None, typer.Option(help=(
        "keep points at least this accurate against FP32: top-1 agreement (classifiers), else cosine"))] = None,
    route: Annotated[list[str] | None, typer.Option(help=f"route (repeatable): {', '.join(ROUTE_NAMES)}")] = None,
    precision: Annotated[list[str] | None, typer.Option(help=(
        f"precision (repeatable): {', '.join(PRECISIONS)}; default the float ones this GPU accelerates"))] = None,
    batch: Annotated[list[int] | None, typer.Option(help="batch size (repeatable); default 1 and 8")] = None,
    opt_level: Annotated[list[int] | None, typer.Option(help="TensorRT builder optimization level (repeatable)")] = None,
    objective: Annotated[str | None, typer.Option(help=(
        "latency (lowest p99) or throughput; default throughput under --max-p99-ms, else latency"))] = None,
    warmup: Annotated[int, typer.Option(help="untimed calls per point")] = 5,
    repeats: Annotated[int, typer.Option(help="timed calls per point")] = 50,
    device: Annotated[str | None, typer.Option(help="cuda, cuda:1, cpu (default: the GPU if any)")] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="write the points, the choice and the skips")] = None,
    png_out: Annotated[Path | None, typer.Option("--png", help="the plot (default OUTPUT_DIR/tune.png)")] = None,
    quiet: Annotated[bool, typer.Option("-q", "--quiet", help="no progress bar")] = False,
) -> None:
    """Sweep route × precision × batch (× opt batch × optimization level for TensorRT) on --data, keep the Pareto
    front (p99 vs throughput vs accuracy), choose under the constraints, record the choice in its sidecar."""
    from trtforge.tuning import TuneConfig
    from trtforge.tuning.sweep import tune as run_tune

    config = TuneConfig(routes=tuple(route or ()), precisions=tuple(precision or ()), batches=tuple(batch or (1, 8)),
                        opt_levels=tuple(opt_level or ()), max_minutes=max_minutes, max_p99_ms=max_p99_ms,
                        min_accuracy=min_accuracy, objective=objective, warmup=warmup, repeats=repeats, device=device)
    report = run_tune(target, data, output_dir, config, progress=not quiet)
    console.print(report.table())
    for skip in report.all_skipped:
        console.print(f"skipped: {escape(skip.why)}", soft_wrap=True)
    runoff = [p.candidate.key for p in report.points if p.timed_with]
    if runoff:
        console.print(f"‡ run-off: {', '.join(runoff)} came within 10 % of the best and were timed again side by "
                      "side; the choice is theirs (docs/tune.md)", soft_wrap=True)
    console.print(f"chosen: {escape(report.chosen.line())} → {escape(str(report.artifact))} (tuned record written)",
                  soft_wrap=True)
    console.print(f"{report.measured} point(s) measured, {report.reused} reused; {report.builds} engine build(s), "
                  f"{report.cache_hits} engine-cache hit(s); {report.elapsed_s:.1f} s")
    if json_out is not None:
        console.print(f"wrote {escape(str(report.save_json(json_out)))}")
    try:
        png = report.save_plot(png_out or output_dir / "tune.png")
    except ImportError:
        say_warning("no PNG plot: it needs matplotlib (pip install 'trtforge[bench]')")
    else:
        console.print(f"wrote {escape(str(png))}")
