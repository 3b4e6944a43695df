"""``trtforge debug precision``: the fewest layers to keep in higher precision for a metric to meet its target.

Example:
    $ trtforge debug precision out/efficientnet_lite0_int8.json --metric top1_agreement --target 0.95
    $ trtforge debug precision model.onnx --data calib/ --preprocessing pp.json --metric cosine --target 0.99
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from trtforge.cli.app import EXIT_FAILED, app, console, guarded, say_error
from trtforge.core.budget import METRICS
from trtforge.core.config import REDUCED_PRECISIONS

#: ``debug precision --precision``: INT8 bisects layers kept in FP16; a reduced float, nodes kept in FP32.
PRECISION_HELP = f"int8 (keeps layers in FP16) | {' | '.join(REDUCED_PRECISIONS)} (keep nodes in FP32)"

debug_app = typer.Typer(no_args_is_help=True, help="Debugging tools: precision bisection.")
app.add_typer(debug_app, name="debug")


@debug_app.command("precision")
@guarded
def debug_precision(
    model: Annotated[Path, typer.Argument(help="an artifact (.json/.engine: its FP32 reference graph) or an FP32 .onnx")],
    metric: Annotated[str, typer.Option(help=f"{' | '.join(METRICS)} (vs FP32)")] = "top1_agreement",
    target: Annotated[float, typer.Option(help="the limit the metric must meet, e.g. 0.95")] = 0.95,
    precision: Annotated[str, typer.Option(help=PRECISION_HELP)] = "int8",
    data: Annotated[Path | None, typer.Option(help="calibration images folder, .npy or .npz (default: photo "
                                                   "crops, for image models with a recorded preprocessing)")] = None,
    preprocessing: Annotated[Path | None, typer.Option(help="JSON preprocessing (or a sidecar) for --data images")] = None,
    samples: Annotated[int, typer.Option(help="samples the search measures on")] = 128,
    held_out: Annotated[int, typer.Option(help="other samples the result is measured on again")] = 128,
    calibrator: Annotated[str, typer.Option(help="mse | percentile | entropy | max")] = "mse",
    max_seconds: Annotated[float | None, typer.Option(help="stop the search after this long (exit 1), e.g. 600")] = None,
) -> None:
    """Bisect over the layers (graph order; INT8 also the sensitivity ranking) for the fewest to keep in higher precision.

    Prints the layer list and the trtforge build flags that reproduce it; exit 1 when the target is not met.
    """
    from trtforge.core.config import QuantConfig
    from trtforge.core.errors import InvalidArgument, MissingFile
    from trtforge.core.preprocessing import read_preprocessing_json
    from trtforge.debug.bisect import Limits, SearchTimeout, bisect_float, bisect_int8, bisection_inputs

    if model.suffix == ".onnx" and not model.is_file():
        raise MissingFile(f"no ONNX file at {model}; pass trtforge debug precision an existing FP32 .onnx file or "
                          "an artifact's .json sidecar")

    if precision != "int8" and precision not in REDUCED_PRECISIONS:
        raise InvalidArgument(f"--precision {precision}: choose {PRECISION_HELP}")
    if metric not in METRICS:
        raise InvalidArgument(f"--metric {metric}: choose one of {', '.join(METRICS)}")
    if max_seconds is not None and not max_seconds > 0:
        raise InvalidArgument(f"--max-seconds {max_seconds}: give a positive number of seconds, e.g. 600")
    config = QuantConfig(calibrator=calibrator, bias_correction=False)  # checks the calibrator name first
    pp = read_preprocessing_json(preprocessing) if preprocessing else None
    graph, calibration, search, held, pp = bisection_inputs(model, data, pp, samples, held_out)
    from rich.progress import Progress

    with Progress(console=console, transient=True) as bar:
        task = bar.add_task("bisecting: calibrating" if precision == "int8" else "bisecting", total=None)

        def progress(evaluated: int, kept: int, value: float) -> None:
            bar.update(task, description=f"bisecting: {evaluated} graphs evaluated, last {kept} kept → "
                                         f"{metric} {value:.4g} (target {target:g})")
            console.print(f"graph {evaluated}: {kept} layers kept, {metric} {value:.4g}", highlight=False)

        limits = Limits(max_seconds, progress)
        try:
            if precision == "int8":
                result = bisect_int8(graph, search, held, metric, target, calibration, pp, config, limits=limits)
            else:
                result = bisect_float(graph, search, held, metric, target, precision, limits=limits)
        except SearchTimeout as exc:
            say_error(f"debug precision: {exc}")
            raise typer.Exit(EXIT_FAILED) from exc
    print_bisection(result, model, data)
    if not result.reached:
        raise typer.Exit(EXIT_FAILED)


def print_bisection(result, model: Path, data: Path | None = None) -> None:
    """The kept layers, the metric before and after, and the build flags."""
    table = Table(title=f"precision bisection ({result.precision}): {result.metric} vs FP32, target {result.target:g}")
    higher = "FP16" if result.precision == "int8" else "FP32"
    table.add_column(f"kept in {higher} (order: {result.order})")
    for label in result.kept:
        table.add_row(escape(label))
    console.print(table)
    console.print(f"{result.metric}: nothing kept {result.baseline:.4f}; with {len(result.kept)} of "
                  f"{result.candidates} layers kept {result.search_value:.4f} on the search samples, "
                  f"{result.held_out_value:.4f} on held-out samples ({result.evaluations} graphs evaluated)")
    if not result.reached:
        console.print(f"[bold red]target not reached[/]: even every layer in {higher} misses {result.metric} "
                      f"{result.target:g}; the model itself or the data may be the problem", soft_wrap=True)
        return
    from trtforge.debug.bisect import reproduce_command

    console.print(f"reproduce: {escape(reproduce_command(model, result, data))}", soft_wrap=True, highlight=False)
