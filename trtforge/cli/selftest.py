"""``trtforge selftest [--route tensorrt] [--json PATH]``: doctor, Lite0 built and checked on each route, one report.

Example:
    $ trtforge selftest --json selftest.json
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from trtforge.cli.app import EXIT_FAILED, app, console, guarded
from trtforge.core.routes import ROUTE_NAMES


@app.command()
@guarded
def selftest(
    route: Annotated[str, typer.Option(help=f"the route to check: {' | '.join(ROUTE_NAMES)} (the PyTorch baseline "
                                            "and ONNX Runtime run too)")] = "tensorrt",
    json_out: Annotated[Path | None, typer.Option("--json", help="write the whole report here (attach it to a bug "
                                                                "report)")] = None,
    output_dir: Annotated[Path | None, typer.Option("-o", "--output-dir",
                                                    help="keep the engines here (default: a temporary folder)")] = None,
    samples: Annotated[int, typer.Option(help="photo crops per check")] = 32,
    repeats: Annotated[int, typer.Option(help="timed calls for each steady-state latency")] = 20,
    artifact: Annotated[list[Path] | None, typer.Option(help="check this sidecar (repeatable) instead of building "
                                                             "Lite0 here, e.g. one built on another machine")] = None,
) -> None:
    """Doctor; EfficientNet-Lite0 built at FP16 through the cache; each engine checked against its reference
    on --route, cuda_graph (eager without a GPU) and onnxruntime, and timed against cuda_graph. Exit 1 when
    a route that ran missed its tolerance; a route that cannot run here is one line, not a failure."""
    from trtforge.debug.selftest import failed, run_selftest

    report = run_selftest(route=route, json_path=json_out, output_dir=output_dir, samples=samples, repeats=repeats,
                          console=console, artifacts=artifact)
    if failed(report):
        raise typer.Exit(EXIT_FAILED)
