"""``trtforge inspect``: a sidecar as tables with the engine's sha256 checked; or an ONNX graph described.

Example:
    $ trtforge inspect out/efficientnet_lite0_fp16.json
    $ trtforge inspect model.onnx          # ops, I/O, dtypes, Q/DQ coverage, nodes the parser refuses
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from trtforge.cli.app import app, console, guarded


def _shape(shape: Any) -> str:
    return "×".join("?" if d < 0 else str(d) for d in shape)


@app.command()
@guarded
def inspect(path: Annotated[Path, typer.Argument(help="an .engine, its .json sidecar, or an .onnx model")]) -> None:
    """Print a sidecar as tables and check the engine's sha256 against it; or describe an ONNX model.

    Exit 1 when the engine's sha256 does not match, or when the TensorRT parser refuses ONNX nodes.
    """
    if path.suffix == ".onnx":
        _inspect_onnx(path)
        return
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
        summary.add_row("preprocessing", f"resize {p.get('resize')} {p.get('interpolation')}, mean {p.get('mean')}, "
                        f"std {p.get('std')}, {p.get('channel_order')} {p.get('layout')}")
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


def _inspect_onnx(path: Path) -> None:
    from trtforge.debug.onnx_inspect import describe_onnx

    info = describe_onnx(path)
    summary = Table(title=f"{escape(path.name)}  (opset {info.opset}, {info.nodes} nodes)", show_header=False)
    summary.add_row("ops", ", ".join(f"{op} {n}" for op, n in info.ops.most_common()))
    summary.add_row("dtypes", ", ".join(f"{k}: {v}" for k, v in info.dtypes.items()))
    if info.qdq_pairs:
        summary.add_row("Q/DQ", f"{info.qdq_pairs} QuantizeLinear; INT8 MAC layers {info.int8_mac_layers} of "
                        f"{info.mac_layers} Conv/MatMul/Gemm")
    else:
        summary.add_row("Q/DQ", "none (not quantized)")
    console.print(summary)
    io = Table(title="inputs and outputs ('?' or a name: a dynamic dim)")
    for col in ("", "name", "dtype", "shape"):
        io.add_column(col)
    for kind, rows in (("in", info.inputs), ("out", info.outputs)):
        for name, dtype, dims in rows:
            io.add_row(kind, escape(name), dtype, "×".join(dims))
    console.print(io)
    for note in info.notes:
        console.print(f"note: {escape(note)}", soft_wrap=True)
    if info.refused is None:
        return
    if not info.refused:
        console.print(f"[green]{escape(info.parser)} ONNX parser: accepts every node[/] (checked without building)")
        return
    refused = Table(title=f"nodes the {escape(info.parser)} ONNX parser refuses (checked without building)")
    for col in ("node", "op", "why"):
        refused.add_column(col)
    for node, op, why in info.refused:
        refused.add_row(escape(node), escape(op), escape(why))
    console.print(refused)
    raise typer.Exit(1)
