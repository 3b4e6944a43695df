"""``trtforge bench``: routes × batch sizes, model-only and end-to-end latency.

Example:
    $ trtforge bench out/efficientnet_lite0_fp16.json --route tensorrt --route cuda_graph --batch 1 --batch 8
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from trtforge.cli.app import app, console, guarded
from trtforge.core.errors import InvalidArgument
from trtforge.core.routes import DEFAULT_BENCH_ROUTES, ROUTE_NAMES


@app.command()
@guarded
def bench(
    target: Annotated[str, typer.Argument(help="an .engine/.json, or zoo:efficientnet_lite0 | zoo:detr_like")],
    route: Annotated[list[str] | None, typer.Option(
        help=f"route (repeatable): {', '.join(ROUTE_NAMES)}; default {', '.join(DEFAULT_BENCH_ROUTES)}")] = None,
    batch: Annotated[list[int] | None, typer.Option(help="batch size (repeatable); default 1 and 8, those the model takes")] = None,
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
    from trtforge.measure.routes import run_bench_command

    unknown = [r for r in route or () if r not in ROUTE_NAMES]
    if unknown:
        raise InvalidArgument(f"--route {' --route '.join(unknown)}: unknown route; choose from {', '.join(ROUTE_NAMES)}")

    run_bench_command(target, route or list(DEFAULT_BENCH_ROUTES), batch or None, warmup=warmup,
                      repeats=repeats, device=device, json_path=json_out, png_path=png_out, console=console,
                      compile_preprocessing=compile_preprocessing)
