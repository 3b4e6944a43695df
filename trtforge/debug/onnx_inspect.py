"""``trtforge inspect MODEL.onnx``: what an ONNX graph holds, and whether the installed parser takes it.

Op histogram, inputs and outputs with their dynamic dims, node dtypes, Q/DQ coverage when the
graph is quantized, and the nodes the installed TensorRT ONNX parser refuses (checked with the
parser's ``supports_model_v2``; nothing is built).

Example:
    >>> info = describe_onnx(Path("model.onnx"))
    >>> info.ops.most_common(2), info.refused
    ([('Conv', 49), ('Clip', 32)], [])
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from trtforge.core.errors import MissingFile


@dataclass(frozen=True)
class OnnxDescription:
    """What ``describe_onnx`` found; ``refused`` is None when no TensorRT parser could be asked."""

    path: Path
    opset: int
    nodes: int
    ops: Counter
    inputs: tuple[tuple[str, str, tuple[str, ...]], ...]  # (name, dtype, dims as text; symbolic names kept)
    outputs: tuple[tuple[str, str, tuple[str, ...]], ...]
    dtypes: dict[str, int]
    qdq_pairs: int = 0
    int8_mac_layers: int = 0
    mac_layers: int = 0
    refused: list[tuple[str, str, str]] | None = None
    parser: str = ""
    notes: tuple[str, ...] = field(default=())


def _io(values) -> tuple[tuple[str, str, tuple[str, ...]], ...]:
    from trtforge.passes.graph import dtype_name

    rows = []
    for value in values:
        dims = tuple("?" if d is None else str(d) for d in (value.shape or ()))
        rows.append((value.name, dtype_name(value.dtype) if value.dtype is not None else "?", dims))
    return tuple(rows)


def _parser_check(proto) -> tuple[list[tuple[str, str, str]] | None, str, tuple[str, ...]]:
    """The nodes the parser refuses in the graph ``trtforge build`` hands it: where it refuses the file as
    written, asked again after the cleanup every build runs (constant folding: a training-mode BatchNormalization
    of constant weights, as TorchScript writes BiT's weight standardization, is gone there)."""
    from trtforge.core import trt

    if not trt.available():
        return None, "", ("no TensorRT bindings: the parser check was skipped (" + trt.INSTALL_HINT + ")",)
    from trtforge.builder.build import parser_refusals
    from trtforge.passes.cleanup import cleanup
    from trtforge.passes.graph import load_ir, to_proto

    info = trt.info()
    parser = f"{info.flavour} {info.version}"
    as_written = parser_refusals(proto.SerializeToString())
    if not as_written:
        return [], parser, ()
    refused = parser_refusals(to_proto(cleanup(load_ir(proto))).SerializeToString())
    nodes = len({node for node, _, _ in as_written}) - len({node for node, _, _ in refused})
    notes = (f"the parser refuses {nodes} node(s) of the file as written that trtforge build's cleanup folds away "
             f"({', '.join(sorted({op for _, op, _ in as_written}))})",) if nodes > 0 else ()
    return refused, parser, notes


def describe_onnx(path: Path, parser: bool = True) -> OnnxDescription:
    """Describe the ONNX file at ``path`` (see the module docstring)."""
    import onnx

    from trtforge.capture.onnx_file import load_onnx
    from trtforge.passes.graph import dtype_summary, has_qdq, load_ir, opset_version
    from trtforge.passes.ops import MAC_OPS
    from trtforge.quantize.coverage import int8_layers

    path = Path(path)
    if not path.is_file():
        raise MissingFile(f"describe_onnx(path={str(path)!r}): no ONNX file there; pass the path of an existing "
                          ".onnx file")
    proto = load_onnx(path)  # external data from the model's folder, the refusals every command makes
    model = load_ir(proto)
    ops = Counter(node.op_type for node in model.graph.all_nodes())
    quantized = has_qdq(model)
    refused, parser_name, notes = None, "", ()
    if parser and proto.ByteSize() >= onnx.checker.MAXIMUM_PROTOBUF:
        notes = (f"{path} with its weights is over protobuf's 2 GiB: the parser check was skipped (trtforge build "
                 "parses it from the file)",)
    elif parser:  # the parser reads bytes with the weights inline: it has no folder to find external data in
        refused, parser_name, notes = _parser_check(proto)
    return OnnxDescription(
        path=path, opset=opset_version(model), nodes=sum(ops.values()), ops=ops,
        inputs=_io(v for v in model.graph.inputs if not v.is_initializer()), outputs=_io(model.graph.outputs),
        dtypes=dtype_summary(model), qdq_pairs=ops.get("QuantizeLinear", 0),
        int8_mac_layers=len(int8_layers(model)) if quantized else 0,
        mac_layers=sum(ops.get(op, 0) for op in MAC_OPS), refused=refused, parser=parser_name, notes=notes,
    )
