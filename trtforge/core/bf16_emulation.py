"""BF16 graphs in ONNX Runtime: an emulation graph with FP32 compute and BF16 storage.

ONNX Runtime's CPU provider has no BF16 kernel for Conv, MatMul and most compute ops (session creation
fails with ``NOT_IMPLEMENTED``), but it has BF16 ``Cast``. :func:`emulate_bf16` derives the graph that
ONNX Runtime can run from a BF16 graph (what ``trtforge build --precision bf16`` hands TensorRT):

- every BF16 tensor type, initializer, constant and cast target becomes FP32 (a BF16 initializer becomes
  the FP32 tensor holding the same values: exact);
- each value a node stores in BF16 is rounded to BF16 by ``Cast(to=BFLOAT16)`` → ``Cast(to=FLOAT)`` and keeps
  its name, so the emulated graph lines up tensor by tensor with the FP32 reference (``compare --layerwise``).

Compute then runs in FP32 on BF16-rounded operands with BF16-rounded results: TensorRT's BF16 with FP32
accumulation. TensorRT fuses layers and keeps a fusion's intermediates unrounded, so the emulation rounds
at least as often as the engine does: its error is an upper estimate of the engine's, not an underestimate.
A node inside a subgraph (If, Loop, Scan) computes in FP32 without the rounding.

Example:
    >>> source, evaluator = ort_source(Path("out/m_bf16.onnx"))
    >>> evaluator
    'BF16 emulated: FP32 compute, BF16 storage'
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import onnx

#: What runs a BF16 graph in ONNX Runtime, as reports name it.
EMULATED = "BF16 emulated: FP32 compute, BF16 storage"
_BF16, _FLOAT = 16, 1  # onnx.TensorProto.BFLOAT16, FLOAT
_DTYPE_ATTRIBUTES = ("to", "dtype")  # Cast, EyeLike, RandomNormal...: an output type set by an attribute
_TENSOR_ATTRIBUTES = ("value",)  # Constant, ConstantOfShape


def ort_source(path: Path) -> tuple[Path | bytes, str | None]:
    """What ONNX Runtime should open for the graph at ``path``: the file itself, or, for a graph with BF16
    values, the serialized emulation graph; and the evaluator line (None for the file as it is).

    Example:
        >>> ort_source(Path("out/m_fp16.onnx"))
        (PosixPath('out/m_fp16.onnx'), None)
    """
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    if not has_bf16(model):
        return path, None
    onnx.external_data_helper.load_external_data_for_model(model, str(Path(path).parent))
    return emulate_bf16(model).SerializeToString(), EMULATED


def has_bf16(model: onnx.ModelProto) -> bool:
    """Whether any tensor type, initializer, constant or cast target of ``model`` (subgraphs included) is BF16."""
    return any(_graph_has_bf16(graph) for graph in _graphs(model.graph))


def emulate_bf16(model: onnx.ModelProto) -> onnx.ModelProto:
    """The FP32-compute, BF16-storage graph of ``model`` (a new proto; see the module docstring).

    Example:
        >>> emulated = emulate_bf16(onnx.load("out/m_bf16.onnx"))
        >>> [n.op_type for n in emulated.graph.node][:3]  # the stem conv, then its output rounded to BF16
        ['Conv', 'Cast', 'Cast']
    """
    import onnx

    out = onnx.ModelProto()
    out.CopyFrom(model)
    try:  # node output types the file does not record
        typed = onnx.shape_inference.infer_shapes(out)
    except (onnx.shape_inference.InferenceError, ValueError):
        typed = out
    stored = {v.name for v in (*typed.graph.value_info, *typed.graph.output)
              if v.type.tensor_type.elem_type == _BF16}
    for graph in _graphs(out.graph):
        _retype(graph)
    _round_stored(out.graph, stored)
    return out


def _graphs(graph: onnx.GraphProto) -> list[onnx.GraphProto]:
    """``graph`` and every subgraph under it."""
    found = [graph]
    for node in graph.node:
        for attribute in node.attribute:
            for sub in (*([attribute.g] if attribute.HasField("g") else []), *attribute.graphs):
                found.extend(_graphs(sub))
    return found


def _graph_has_bf16(graph: onnx.GraphProto) -> bool:
    values = (*graph.input, *graph.output, *graph.value_info)
    if any(v.type.tensor_type.elem_type == _BF16 for v in values):
        return True
    if any(t.data_type == _BF16 for t in graph.initializer):
        return True
    return any((a.name in _DTYPE_ATTRIBUTES and a.i == _BF16) or (a.name in _TENSOR_ATTRIBUTES and a.t.data_type == _BF16)
               for node in graph.node for a in node.attribute)


def _fp32_tensor(tensor: onnx.TensorProto) -> onnx.TensorProto:
    """The FP32 tensor holding ``tensor``'s BF16 values (exact), same name."""
    import numpy as np
    from onnx import numpy_helper

    return numpy_helper.from_array(numpy_helper.to_array(tensor).astype(np.float32), tensor.name)


def _retype(graph: onnx.GraphProto) -> None:
    """Every BF16 type, initializer, constant and cast target of ``graph`` (not its subgraphs) → FP32, in place."""
    for value in (*graph.input, *graph.output, *graph.value_info):
        if value.type.tensor_type.elem_type == _BF16:
            value.type.tensor_type.elem_type = _FLOAT
    for index, tensor in enumerate(graph.initializer):
        if tensor.data_type == _BF16:
            graph.initializer[index].CopyFrom(_fp32_tensor(tensor))
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.name in _DTYPE_ATTRIBUTES and attribute.i == _BF16:
                attribute.i = _FLOAT
            elif attribute.name in _TENSOR_ATTRIBUTES and attribute.t.data_type == _BF16:
                attribute.t.CopyFrom(_fp32_tensor(attribute.t))


def _round_stored(graph: onnx.GraphProto, stored: set[str]) -> None:
    """After each node output (and graph input) in ``stored``, the BF16 rounding pair; the name stays on
    the rounded value, the node's own output is renamed ``NAME.fp32``."""
    from onnx import helper

    nodes = []
    for value in graph.input:  # an input fed in BF16: round the FP32 feed, its readers read the rounded one
        if value.name in stored:
            rounded = f"{value.name}.bf16_rounded"
            _rename_reads(graph, value.name, rounded)
            nodes += _rounding(value.name, rounded, helper)
    for node in graph.node:
        nodes.append(node)
        if node.op_type == "Constant":  # its value is a BF16 value already, now held exactly in FP32
            continue
        for index, name in enumerate(node.output):
            if name in stored:
                node.output[index] = f"{name}.fp32"
                nodes += _rounding(f"{name}.fp32", name, helper)
    del graph.node[:]
    graph.node.extend(nodes)


def _rounding(source: str, target: str, helper) -> list[onnx.NodeProto]:
    return [helper.make_node("Cast", [source], [f"{target}.bf16"], to=_BF16, name=f"{target}.bf16_store"),
            helper.make_node("Cast", [f"{target}.bf16"], [target], to=_FLOAT, name=f"{target}.bf16_load")]


def _rename_reads(graph: onnx.GraphProto, old: str, new: str) -> None:
    """Every read of ``old`` in ``graph``'s nodes and subgraphs (outer-scope reads) → ``new``."""
    for sub in _graphs(graph):
        for node in sub.node:
            for index, name in enumerate(node.input):
                if name == old:
                    node.input[index] = new
