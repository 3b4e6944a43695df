"""``trtforge check ARTIFACT``: does the engine give the reference's answers on this machine? Exit 0 or 1.

Example:
    $ trtforge check out/efficientnet_lite0_fp16.json --route tensorrt --samples 64
    $ trtforge check out/efficientnet_lite0_fp16.json --route onnxruntime --inputs inputs.npz
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from trtforge.cli.app import EXIT_FAILED, app, console, guarded, say_error
from trtforge.core.routes import ROUTE_NAMES

#: Options ``check`` and ``compare`` share.
DeviceOption = Annotated[str | None, typer.Option(help="e.g. cuda:0 or cpu (default: the route's)")]
InputsOption = Annotated[Path | None, typer.Option(help=".npz with one array per input, instead of --samples")]
LimitOption = Annotated[float | None, typer.Option(help="override the tolerance of the task's metric")]


@app.command()
@guarded
def check(
    artifact: Annotated[Path, typer.Argument(help="an .engine or its .json sidecar")],
    route: Annotated[str, typer.Option(help=" | ".join(ROUTE_NAMES))] = ROUTE_NAMES[0],
    device: DeviceOption = None,
    samples: Annotated[int, typer.Option(help="samples made from the sidecar (photo crops for image models)")] = 32,
    inputs: InputsOption = None,
    limit: LimitOption = None,
    repeats: Annotated[int, typer.Option(help="timed calls for the steady-state latency")] = 20,
    fp16: Annotated[bool, typer.Option("--fp16/--no-fp16", help=(
        "--route tensorrt: time a quantized engine against its FP16 build (beside it, else built through the "
        "engine cache) and print the speed-up"))] = True,
    model: Annotated[str | None, typer.Option(help=(
        "a direct-path artifact's PyTorch model, as its factory package.module:function: the FP32 reference and "
        "the PyTorch routes run it"))] = None,
) -> None:
    """Run ARTIFACT through --route and compare it with its FP32 reference (ONNX in ONNX Runtime; PyTorch for a
    direct-path artifact)."""
    from trtforge.builder.progress import StepProgress
    from trtforge.debug.check import CannotRunHere, check_artifact

    options = {}
    if model is not None:
        from trtforge.cli.models import module_from_factory

        options["model"] = module_from_factory(model)
    try:
        with StepProgress(f"check {artifact.stem}") as steps:  # on stderr, once it runs more than a moment
            report = check_artifact(artifact, route=route, device=device, samples=samples, inputs=inputs, limit=limit,
                                    repeats=repeats, compare_fp16=fp16, progress=steps, **options)
    except CannotRunHere as exc:
        say_error(str(exc))
        raise typer.Exit(EXIT_FAILED) from exc
    print_check(report)
    if not report.passed:
        raise typer.Exit(EXIT_FAILED)


def print_judgement(title: str, j) -> None:
    """Every output's metrics as a table (``check`` and ``compare``)."""
    table = Table(title=title)
    for col in ("output", "rel. L2", "max abs", "cosine", "top-1 agree"):
        table.add_column(col, justify="left" if col == "output" else "right")
    for o in j.outputs:
        table.add_row(escape(o.name), f"{o.rel_l2:.3e}", f"{o.max_abs:.3e}", f"{o.cosine:.6f}",
                      "-" if o.top1 is None else f"{o.top1:.3f}")
    console.print(table)


def print_verdict(j) -> None:
    """PASS with the limit, or FAIL with each output that missed it."""
    if j.passed:
        sign = "≤" if j.metric == "rel_l2" else "≥"
        console.print(f"[bold green]PASS[/]: {j.metric} {sign} {j.limit:g} on every output")
    else:
        console.print(f"[bold red]FAIL[/]: {escape('; '.join(j.failures))}", soft_wrap=True)


def print_check(report) -> None:
    """The report as a table, the timings, the verdict line and, on failure, the next step."""
    j, t = report.judgement, report.timing
    route = report.route if report.evaluator is None else f"{report.route} ({report.evaluator})"
    print_judgement(f"check {escape(report.name)}: route {escape(route)} on {report.device} vs {report.reference} "
                    f"({report.samples} samples, batch {report.batch}; task {j.task}, tolerances for {j.precision})", j)
    cached = ("" if t.first_call_cached_ms is None
              else f" ({t.first_call_cached_ms:.1f} ms with the JIT runtime cache a first load stored)")
    console.print(f"first call {t.first_call_ms:.1f} ms{cached}, steady state {t.steady_ms:.3f} ms/batch, "
                  f"{t.memory_kind} {t.memory_mib:.0f}")
    if report.speedup is not None:
        colour = "green" if report.speedup.pays_off else "yellow"
        console.print(f"[{colour}]speed-up[/]: {escape(report.speedup.line)}", soft_wrap=True)
    print_verdict(j)
    if not report.passed:
        console.print(f"next: {escape(report.hint or '')}", soft_wrap=True)
