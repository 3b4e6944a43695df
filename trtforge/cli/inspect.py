"""``trtforge inspect``: a sidecar as tables with the engine's sha256 checked, or an ONNX model described.

Example:
    $ trtforge inspect out/efficientnet_lite0_fp16.json
    $ trtforge inspect model.onnx      # ops, I/O, dtypes, Q/DQ coverage, nodes the parser refuses
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from trtforge.cli.app import app, console, guarded, say_error


def _shape(shape: Any) -> str:
    return "×".join("?" if d < 0 else str(d) for d in shape)


@app.command()
@guarded
def inspect(path: Annotated[Path, typer.Argument(help="an .engine, its .json sidecar, or an .onnx model")]) -> None:
    """Print a sidecar as tables and check the engine's sha256 against it; or describe an ONNX model.

    Exit 1 when the engine's sha256 does not match, or when the TensorRT parser refuses ONNX nodes.
    """
    from trtforge.core.errors import MissingFile
    from trtforge.core.sidecar import EngineHashMismatch, read_sidecar

    if path.suffix.lower() == ".onnx":
        if not path.is_file():
            raise MissingFile(f"no ONNX file at {path}; pass trtforge inspect an existing .onnx file, an .engine "
                              "or its .json sidecar")
        _inspect_onnx(path)
        return
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
    if sc.target_plan is not None and sc.target_plan.layers:
        console.print(target_plan_table(sc.target_plan))
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
    edits = sc.graph_edits
    if edits is not None and edits.outputs:
        row("cut at", ", ".join(edits.outputs) + " (--outputs: the graph's outputs, dead nodes removed)")
    if edits is not None and edits.nms is not None:
        n = edits.nms
        row("post-processing", f"NMS {n.head}: score > {n.score_threshold}, IoU > {n.iou_threshold}, "
            f"{'class-agnostic' if n.class_agnostic else 'per class'}, top {n.candidates} candidates, "
            f"{n.max_detections} detections kept, {n.rounds} suppression rounds; outputs {', '.join(n.outputs)}")
    if sc.preprocessing:
        p = sc.preprocessing
        fit = f"letterbox (pad {p.pad_value:g})" if p.resize_mode == "letterbox" else "resize"
        row("preprocessing", f"{fit} {list(p.size)} {p.interpolation}, mean {list(p.mean)}, "
            f"std {list(p.std)}, {p.channel_order} {p.layout}")
    if sc.quantization:
        q = sc.quantization.to_dict()
        row("quantization", ", ".join(f"{k}={v}" for k, v in q.items() if not isinstance(v, (dict, list))))
        if q.get("auto_precision"):  # precision="auto": how many layers took each precision
            row("precision auto", ", ".join(f"{p}: {n}" for p, n in q["auto_precision"]["counts"].items())
                + " layer(s); per layer: the sidecar's quantization.auto_precision")
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


def target_plan_table(plan: Any) -> Table:
    """What each quantized layer runs as on each target; layers that run alike share a row."""
    targets = list(plan.targets)
    groups: dict[tuple, list[str]] = {}
    for layer in plan.layers:
        runs = layer.get("runs_as") or {}
        key = (layer.get("op", "?"), layer.get("quantized_as", "?"), *(runs.get(t, "?") for t in targets))
        groups.setdefault(key, []).append(str(layer.get("layer", "?")))
    title = f"quantized layers on each target ({plan.flavour} {plan.version}"
    title += "; built with allow_unaccelerated)" if plan.allow_unaccelerated else ")"
    table = Table(title=escape(title))
    for col in ("layers", "op", "quantized as", *targets):
        table.add_column(escape(col))
    for (op, scheme, *runs), names in groups.items():
        shown = ", ".join(names[:3]) + (f" (+{len(names) - 3})" if len(names) > 3 else "")
        cells = [escape(r) if r == scheme else f"[yellow]{escape(r)}[/]" for r in runs]
        table.add_row(f"{len(names)}: {escape(shown)}", escape(op), escape(scheme), *cells)
    return table


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
    from trtforge.builder.build import OnnxParseError

    say_error(str(OnnxParseError(path.name, info.refused)))  # what build would say, with the fix
    raise typer.Exit(1)
