"""``trtforge compare A B``: two models on the same inputs, output by output; ``--layerwise``: layer by layer.

Example:
    $ trtforge compare trtforge.zoo:efficientnet_lite0 out/efficientnet_lite0_fp16.json@fp16 --save-inputs in.npz
    $ trtforge compare ref_outputs.npz out/efficientnet_lite0_fp16.json --inputs in.npz     # on the GPU machine
    $ trtforge compare --layerwise out/m_reference_fp32.onnx out/m_int8.onnx --plot divergence.png
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from trtforge.cli.app import EXIT_FAILED, app, console, guarded
from trtforge.cli.check import DeviceOption, InputsOption, LimitOption, print_judgement, print_verdict


@app.command()
@guarded
def compare(
    a: Annotated[str, typer.Argument(help="reference: module:function, .onnx, artifact[@route] or outputs .npz")],
    b: Annotated[str, typer.Argument(help="candidate, the same kinds")],
    route: Annotated[str, typer.Option(help="route for an artifact without @route")] = "tensorrt",
    device: DeviceOption = None,
    samples: Annotated[int, typer.Option(help="samples to make when --inputs is not given")] = 16,
    inputs: InputsOption = None,
    limit: LimitOption = None,
    save_inputs: Annotated[Path | None, typer.Option(help="write the inputs used to this .npz")] = None,
    save_outputs: Annotated[Path | None, typer.Option(help="write A's outputs to this .npz")] = None,
    layerwise: Annotated[bool, typer.Option(help="A and B are ONNX graphs: error of every shared tensor")] = False,
    threshold: Annotated[float | None, typer.Option(help="--layerwise: relative L2 that counts as diverged")] = None,
    plot: Annotated[Path | None, typer.Option(help="--layerwise: PNG of the error along the depth")] = None,
    max_memory: Annotated[str | None, typer.Option(
        help="--layerwise: intermediate tensors held at once, e.g. 512M or 2G (default: a quarter of the "
             "available memory, at most 4G)")] = None,
) -> None:
    """Run A and B on the same inputs and compare every output (exit 1 when B is out of tolerance)."""
    if layerwise:
        _layerwise(Path(a), Path(b), inputs, samples, threshold, plot, parse_size(max_memory))
        return
    from trtforge.builder.progress import StepProgress
    from trtforge.debug.compare import compare_sides, save_run

    with StepProgress("compare") as steps:  # on stderr, once it runs more than a moment
        result = compare_sides(a, b, route=route, device=device, samples=samples, inputs=inputs, limit=limit,
                               progress=steps)
    j = result.judgement
    for side, runs in zip("AB", result.runs, strict=True):
        if runs:
            console.print(f"{side} runs {escape(runs)}", soft_wrap=True)
    print_judgement(f"{escape(a)}  vs  {escape(b)}  ({result.samples} samples; task {j.task}, tolerances for {j.precision})", j)
    for path in save_run(result, save_inputs, save_outputs):
        console.print(f"wrote {escape(str(path))}")
    print_verdict(j)
    if not j.passed:
        raise typer.Exit(EXIT_FAILED)


def parse_size(text: str | None) -> int | None:
    """``--max-memory`` → bytes: a number with an optional K, M or G (powers of 1024).

    Example:
        >>> parse_size("512M")
        536870912
    """
    from trtforge.core.errors import InvalidArgument

    if text is None:
        return None
    value = text.strip().upper().removesuffix("B")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(value[-1:], 1)
    number = value[:-1] if scale > 1 else value
    try:
        size = float(number) * scale
    except ValueError:
        size = -1.0
    if not size >= 1 << 20 or size == float("inf"):
        raise InvalidArgument(f"--max-memory {text}: give a size of at least 1M, e.g. --max-memory 512M or 2G")
    return int(size)


def _layerwise(reference: Path, candidate: Path, inputs: Path | None, samples: int, threshold: float | None,
               plot_path: Path | None, max_memory: int | None = None) -> None:
    from trtforge.core.errors import InvalidArgument, MissingFile
    from trtforge.debug.layerwise import layerwise, plot

    for path in (reference, candidate):
        if path.suffix != ".onnx":
            raise InvalidArgument(f"--layerwise compares two ONNX graphs; {path} is not an .onnx file")
    for path in (reference, candidate):
        if not path.is_file():
            raise MissingFile(f"no ONNX file at {path}; --layerwise compares two existing .onnx files, e.g. "
                              "trtforge compare --layerwise out/m_reference_fp32.onnx out/m_int8.onnx")
    arrays = None
    if inputs is not None:
        import numpy as np

        with np.load(inputs) as data:
            arrays = {k: data[k] for k in data.files}
    elif candidate.with_suffix(".json").is_file():  # an artifact's graph: its sidecar knows the shapes built
        from trtforge.core.sidecar import read_sidecar
        from trtforge.measure.inputs import make_inputs

        sidecar = read_sidecar(candidate.with_suffix(".json"))
        arrays = make_inputs(sidecar.inputs, sidecar.profiles, samples, sidecar.preprocessing)
    from rich.progress import Progress

    with Progress(console=console, transient=True) as bar:
        task = bar.add_task("layer-wise: tensor chunks", total=None)
        report = layerwise(reference, candidate, arrays, samples=samples, threshold=threshold, max_memory=max_memory,
                           progress=lambda done, total: bar.update(task, completed=done, total=total))
    print_layerwise(report)
    if plot_path is not None:
        written = plot(report, plot_path, f"{candidate.name} vs {reference.name}")
        console.print(f"wrote {escape(str(written))}" if written else
                      "no plot: matplotlib is not installed (pip install matplotlib)")
    if report.first is not None:
        raise typer.Exit(EXIT_FAILED)


def print_layerwise(report, around: int = 3, worst: int = 8) -> None:
    """The rows around the first divergence and the worst ones, in graph order; then the verdict line."""
    layers = list(report.layers)
    first = report.first
    keep = set(sorted(range(len(layers)), key=lambda i: -layers[i].rel_l2)[:worst])
    if first is not None:
        at = layers.index(first)
        keep |= set(range(max(0, at - around), min(len(layers), at + around + 1)))
    keep |= {len(layers) - 1} if layers else set()
    table = Table(title=f"layer-wise divergence: {len(layers)} shared tensors, {report.precision} candidate, "
                        f"threshold rel. L2 {report.threshold:g} (showing {len(keep)})")
    for col in ("#", "layer", "op", "rel. L2", "cosine", "max abs"):
        table.add_column(col, justify="right" if col in ("#", "rel. L2", "cosine", "max abs") else "left")
    for i in sorted(keep):
        row = layers[i]
        style = "bold red" if row is first else ("red" if row.rel_l2 > report.threshold else None)
        table.add_row(str(row.index), escape(row.label), row.op_type, f"{row.rel_l2:.3e}", f"{row.cosine:.5f}",
                      f"{row.max_abs:.3e}", style=style)
    console.print(table)
    added = ", ".join(f"{escape(row.label)} (+{row.added:.3g})" for row in report.most_added(5))
    console.print(f"most error added by the layer itself: {added}", soft_wrap=True)
    for note in report.notes:
        console.print(f"note: {escape(note)}", soft_wrap=True)
    if first is None:
        console.print(f"[bold green]no layer past relative L2 {report.threshold:g}[/]")
    else:
        console.print(f"[bold red]first layer past the threshold[/]: {escape(first.label)} ({first.op_type}, tensor "
                      f"{escape(first.tensor)}), relative L2 {first.rel_l2:.3g} > {report.threshold:g}", soft_wrap=True)
