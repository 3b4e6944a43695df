"""``trtforge inspect``: a sidecar as tables, and the engine's sha256 checked against it.

Example:
    $ trtforge inspect out/efficientnet_lite0_fp16.json
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from trtforge.cli.app import app, console, guarded, say_error
from trtforge.core.errors import Unsupported


def refuse_onnx(path: Path) -> None:
    """``inspect X.onnx`` describes no ONNX model yet: say so instead of showing an engine's sidecar."""
    if path.suffix.lower() == ".onnx":
        raise Unsupported(f"{path} is an ONNX model; trtforge inspect reads an engine's sidecar (.json or "
                          f".engine). Build it first (trtforge build {path}) and inspect the .json it writes")


def _shape(shape: Any) -> str:
    return "×".join("?" if d < 0 else str(d) for d in shape)


@app.command()
@guarded
def inspect(path: Annotated[Path, typer.Argument(help="an .engine or its .json sidecar")]) -> None:
    """Print a sidecar as tables and check the engine's sha256 against it."""
    from trtforge.core.sidecar import EngineHashMismatch, read_sidecar

    refuse_onnx(path)
    sc = read_sidecar(path)
    try:
        sc.verify_engine()
        verdict = "[green]sha256 OK[/]"
        ok = True
    except (EngineHashMismatch, FileNotFoundError) as exc:
        verdict = "[red]sha256 MISMATCH (see below)[/]"
        ok = False
        problem = str(exc)
    summary = Table(title=escape(f"{sc.name}  ({sc.path})"), show_header=False)
    summary.add_row("engine", f"{escape(sc.engine_file)}  {sc.engine_size / 1e6:.2f} MB  {verdict}")
    _rows(summary, sc)
    console.print(summary)
    console.print(_io_table(sc))
    if sc.profiles:
        console.print(_profile_table(sc))
    if not ok:
        say_error(problem)
        raise typer.Exit(1)


def _rows(summary: Table, sc: Any) -> None:
    """The summary's rows after the engine's, every value escaped (sidecars hold user text)."""
    from trtforge.builder.targets import where_it_runs

    def row(label: str, text: str) -> None:
        summary.add_row(label, escape(text))

    row("precision", f"{sc.precision.built} (requested {sc.precision.requested}); "
                    + ", ".join(f"{k}: {v}" for k, v in sc.precision.node_dtypes.items()))
    b = sc.builder
    seconds = "?" if b.build_seconds is None else b.build_seconds
    row("builder", f"{b.flavour} {b.version}, opt level {b.optimization_level}, built in {seconds} s")
    row("runs on", where_it_runs(b))
    row("source", f"{sc.source.kind} → {sc.source.onnx_file}")
    if sc.preprocessing:
        p = sc.preprocessing
        row("preprocessing", f"resize {list(p.size)} {p.interpolation}, mean {list(p.mean)}, "
            f"std {list(p.std)}, {p.channel_order} {p.layout}")
    if sc.quantization:
        q = sc.quantization.to_dict()
        row("quantization", ", ".join(f"{k}={v}" for k, v in q.items() if not isinstance(v, (dict, list))))
    for note in sc.notes:
        row("note", str(note))


def _io_table(sc: Any) -> Table:
    io = Table(title="inputs and outputs")
    for col in ("", "name", "dtype", "shape"):
        io.add_column(col)
    for kind, specs in (("in", sc.inputs), ("out", sc.outputs)):
        for s in specs:
            io.add_row(kind, escape(s.name), escape(s.dtype), _shape(s.shape))
    return io


def _profile_table(sc: Any) -> Table:
    prof = Table(title="optimization profiles")
    for col in ("#", "input", "min", "opt", "max"):
        prof.add_column(col)
    for i, profile in enumerate(sc.profiles):
        for name, triple in profile.items():
            prof.add_row(str(i), escape(name), _shape(triple["min"]), _shape(triple["opt"]), _shape(triple["max"]))
    return prof
