"""``trtforge inspect``: a sidecar as tables, and the engine's sha256 checked against it.

Example:
    $ trtforge inspect out/efficientnet_lite0_fp16.json
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from trtforge.cli.app import app, console, guarded


def _shape(shape: Any) -> str:
    return "×".join("?" if d < 0 else str(d) for d in shape)


@app.command()
@guarded
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
    summary.add_row("precision", f"{sc.precision.built} (requested {sc.precision.requested}); "
                    + ", ".join(f"{k}: {v}" for k, v in sc.precision.node_dtypes.items()))
    b = sc.builder
    seconds = "?" if b.build_seconds is None else b.build_seconds
    summary.add_row("builder", f"{b.flavour} {b.version}, opt level {b.optimization_level}, built in {seconds} s")
    summary.add_row("runs on", where_it_runs(b))
    summary.add_row("source", f"{sc.source.kind} → {sc.source.onnx_file}")
    if sc.preprocessing:
        p = sc.preprocessing
        summary.add_row("preprocessing", f"resize {list(p.size)} {p.interpolation}, mean {list(p.mean)}, "
                        f"std {list(p.std)}, {p.channel_order} {p.layout}")
    if sc.quantization:
        q = sc.quantization.to_dict()
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
