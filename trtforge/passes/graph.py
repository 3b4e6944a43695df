"""Graph helpers on onnx_ir shared by the passes and the quantizer.

Load/save and serialisation, dtype summaries, Q/DQ detection, constant values, attributes,
layer labels, node names, the opset, input specs, and ONNX Runtime sessions (the one place an
IR model is serialised for ONNX Runtime, with extra outputs for observers).

Producers and consumers come from onnx_ir itself: ``value.producer()``, ``value.uses()``. The
consumers of a value are in graph order when the model was just parsed or copied
(``copy_model``), which is how the quantizer starts.

Example:
    >>> model = load_ir(Path("m.onnx"))
    >>> dtype_summary(model)
    {'float16': 120, 'float32': 6}
    >>> constant_value(model.graph.initializers["conv.weight"]).shape
    (32, 3, 3, 3)
"""

from __future__ import annotations

import copy as _copy
import logging
import re
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir
import onnx_ir.passes.common as common

from trtforge.core.errors import InternalError, InvalidArgument
from trtforge.core.quant_plan import QDQ_OPSET  # noqa: F401  (the Q/DQ graphs' opset, named with the plan)
from trtforge.core.specs import ONNX_TO_DTYPE
from trtforge.passes.ops import MAC_OPS, QDQ_OPS


def load_ir(source: Path | onnx.ModelProto | ir.Model) -> ir.Model:
    """An ``onnx_ir`` model from a path, a ModelProto or an ir.Model (returned as is).

    A path is read by the one ONNX loader (``capture.onnx_file.load_onnx``): external data from the model's
    folder, whatever the working folder, and the same refusals as every other command.
    """
    if isinstance(source, ir.Model):
        return source
    if isinstance(source, onnx.ModelProto):
        return ir.serde.deserialize_model(source)
    from trtforge.capture.onnx_file import load_onnx

    return ir.serde.deserialize_model(load_onnx(Path(source)))


def to_proto(model: ir.Model | onnx.ModelProto) -> onnx.ModelProto:
    return model if isinstance(model, onnx.ModelProto) else ir.serde.serialize_model(model)


def proto_bytes(model: ir.Model | onnx.ModelProto) -> bytes:
    """Serialized bytes of the model (weights inline), deterministic for the same graph."""
    return to_proto(model).SerializeToString(deterministic=True)


def save_model(model: ir.Model | onnx.ModelProto, path: Path) -> bytes:
    """Save as one .onnx file (no external data) atomically; returns the bytes written."""
    from trtforge.core.atomic import atomic_write_bytes

    data = proto_bytes(model)
    if len(data) >= 2**31:
        raise InvalidArgument(f"{path}: model is {len(data)} bytes, over protobuf's 2 GiB; use external data")
    atomic_write_bytes(Path(path), data)
    return data


#: onnx_ir logs a failed shape inference as a warning with a traceback, then leaves the model as it was.
SHAPE_INFERENCE_LOGGER = "onnx_ir.passes.common.shape_inference"


class _Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def infer_shapes(model: ir.Model) -> str | None:
    """ONNX shape inference in place; the failure's first line (None when it ran), never printed.

    A failure leaves the model unchanged; callers that need the types say so in their own words.

    Example:
        >>> infer_shapes(model) is None
        True
    """
    logger = logging.getLogger(SHAPE_INFERENCE_LOGGER)
    kept, propagate = _Kept(), logger.propagate
    logger.addHandler(kept)
    logger.propagate = False
    try:
        common.ShapeInferencePass()(model)
    finally:
        logger.removeHandler(kept)
        logger.propagate = propagate
    for record in kept.records:
        if record.exc_info and record.exc_info[1] is not None:
            return str(record.exc_info[1]).strip().splitlines()[0]
        return record.getMessage().splitlines()[0]
    return None


def has_qdq(model: ir.Model) -> bool:
    return any(node.op_type in QDQ_OPS for node in model.graph.all_nodes())


def dtype_name(dtype: ir.DataType) -> str:
    """numpy-style name: ``ir.DataType.FLOAT`` → ``"float32"``."""
    return ONNX_TO_DTYPE.get(int(dtype), dtype.name.lower())


def node_dtype(node: ir.Node) -> str | None:
    """The dtype a node computes in: its first float output's, else its first output's."""
    for out in node.outputs:
        if out.dtype is not None and out.dtype.is_floating_point():
            return dtype_name(out.dtype)
    for out in node.outputs:
        if out.dtype is not None:
            return dtype_name(out.dtype)
    return None


def dtype_summary(model: ir.Model) -> dict[str, int]:
    """Node counts per computing dtype (float16, float32, int8 for Q/DQ ...), sorted by name."""
    if any(out.dtype is None for node in model.graph for out in node.outputs):
        infer_shapes(model)  # e.g. Q/DQ graphs written without value_info
    counts: Counter[str] = Counter()
    for node in model.graph.all_nodes():
        if node.op_type == "QuantizeLinear":  # counted as the type it quantizes to (int8, float8e4m3fn)
            out = node.outputs[0].dtype
            counts[dtype_name(out) if out is not None else "int8"] += 1
            continue
        counts[node_dtype(node) or "unknown"] += 1
    return dict(sorted(counts.items()))


# -- reading the graph ---------------------------------------------------------------------------
def attr(node: ir.Node, name: str, default: Any = None) -> Any:
    """The value of attribute ``name`` of ``node``, else ``default``.

    Example:
        >>> attr(conv, "group", 1)
        1
    """
    found = node.attributes.get(name)
    return default if found is None else found.value


def values_by_name(graph: ir.Graph) -> dict[str, ir.Value]:
    """Every named value of ``graph``'s top level: inputs, initializers and node outputs."""
    values: dict[str, ir.Value] = {v.name: v for v in graph.inputs if v.name}
    values.update(graph.initializers)
    for node in graph:
        values.update((out.name, out) for out in node.outputs if out.name)
    return values


def nodes_by_output(graph: ir.Graph) -> dict[str, ir.Node]:
    """Top-level nodes by the name of their first output (how a plan addresses a layer)."""
    return {node.outputs[0].name: node for node in graph if node.outputs and node.outputs[0].name}


def consumers(value: ir.Value) -> list[tuple[ir.Node, int]]:
    """(node, input index) of each use of ``value``."""
    return [(use.node, use.idx) for use in value.uses()]


def is_initializer(value: ir.Value | None) -> bool:
    return value is not None and value.is_initializer()


def is_constant(value: ir.Value | None) -> bool:
    """Whether ``value`` is an initializer or a Constant output (through Cast/Identity), without reading it."""
    while value is not None:
        if value.is_initializer():
            return value.const_value is not None
        node = value.producer()
        if node is None:
            return False
        if node.op_type == "Constant":
            return node.attributes.get("value") is not None
        if node.op_type not in ("Cast", "Identity") or not node.inputs:
            return False
        value = node.inputs[0]
    return False


def constant_value(value: ir.Value | None) -> np.ndarray | None:
    """The value of an initializer or a Constant output (through Cast/Identity), else None.

    Example:
        >>> constant_value(conv.inputs[1]).shape
        (32, 3, 3, 3)
    """
    if value is None:
        return None
    if value.is_initializer():
        return None if value.const_value is None else value.const_value.numpy()
    node = value.producer()
    if node is None:
        return None
    if node.op_type == "Constant":
        tensor = attr(node, "value")
        return None if tensor is None else tensor.numpy()
    if node.op_type in ("Cast", "Identity") and node.inputs:
        src = constant_value(node.inputs[0])
        if src is not None and node.op_type == "Cast":
            src = src.astype(ir.DataType(attr(node, "to")).numpy())
        return src
    return None


_SCOPE = re.compile(r"([\w.]+): (?!aten\.)[\w.]+")


def layer_label(node: ir.Node) -> str:
    """A readable name: the weight's name, else the torch module path from export metadata, else the node.

    Example:
        >>> layer_label(conv)
        '_blocks.0._depthwise_conv'
    """
    if node.op_type in MAC_OPS:
        for value in node.inputs[1:2]:
            if is_initializer(value) and not re.match(r"(val|_val|onnx::|const)_?\d*", value.name):
                return re.sub(r"\.weight$", "", value.name)
    namespace = node.metadata_props.get("namespace")
    if namespace:
        parts = [m.group(1) for m in _SCOPE.finditer(namespace) if not m.group(1).startswith("aten")]
        if parts:
            return parts[-1]
    return node.name or node.outputs[0].name


def ensure_node_names(model: ir.Model) -> ir.Model:
    """Give every top-level node a unique name (in place); a plan addresses nodes by name."""
    seen: set[str] = set()
    for i, node in enumerate(model.graph):
        name = node.name or f"{node.op_type}_{i}"
        while name in seen:
            name = f"{name}_{i}"
        node.name = name
        seen.add(name)
    return model


def opset_version(model: ir.Model) -> int:
    return int(model.opset_imports.get("", model.opset_imports.get("ai.onnx", 1)))


def ensure_opset(model: ir.Model, version: int = QDQ_OPSET) -> ir.Model:
    """The model at opset ≥ ``version`` (FP16 Q/DQ scales need 19); converts (a new model) when lower."""
    if opset_version(model) >= version:
        return model
    try:
        return load_ir(onnx.version_converter.convert_version(to_proto(model), version))
    except Exception as exc:
        raise InvalidArgument(
            f"the graph is at opset {opset_version(model)} and could not be converted to opset {version}, "
            f"which FP16 Q/DQ scales need ({exc}). Re-export the model with opset_version>={version}."
        ) from exc


def input_specs(model: ir.Model) -> list[tuple[str, np.dtype, tuple[int | None, ...]]]:
    """(name, numpy dtype, shape with None for symbolic dims) for each real graph input.

    Example:
        >>> input_specs(model)
        [('images', dtype('float32'), (None, 3, 224, 224))]
    """
    specs = []
    for value in model.graph.inputs:
        if value.is_initializer():
            continue
        dims = tuple(d if isinstance(d, int) else None for d in value.shape) if value.shape is not None else ()
        specs.append((value.name, np.dtype(value.dtype.numpy()), dims))
    return specs


# -- ONNX Runtime --------------------------------------------------------------------------------
def ort_providers() -> list[str]:
    """CUDA first when ONNX Runtime offers it, then CPU."""
    import onnxruntime as ort

    available = ort.get_available_providers()
    return [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider") if p in available]


def ort_session(model: ir.Model | onnx.ModelProto, extra_outputs: Iterable[str] = (),
                providers: list[str] | None = None, threads: int | None = None):
    """An ONNX Runtime session of ``model`` (known-bad optimisers off, ``trtforge.core.ort_session``).

    These sessions analyse graphs (calibration, probes, reports), often reading every intermediate
    tensor of a batch: they run without ONNX Runtime's CPU arena, so their memory follows the batch
    being run, not the largest or the sum of the batches before it.

    Example:
        >>> ort_session(model, extra_outputs=["conv_out"]).run(["conv_out"], {"x": x})
    """
    from trtforge.core.ort_session import session
    from trtforge.core.ort_weights import share_large_initializers

    proto = to_proto(model)
    if proto is model:  # the caller's proto: the large initializers are moved out of a copy
        proto = onnx.ModelProto()
        proto.CopyFrom(model)
    names = [n for n in dict.fromkeys(extra_outputs) if n not in {o.name for o in proto.graph.output}]
    proto.graph.output.extend(onnx.helper.make_empty_tensor_value_info(n) for n in names)
    shared = share_large_initializers(proto)
    return session(proto.SerializeToString(), providers=providers or ort_providers(), threads=threads,
                   memory_arena=False, initializers=shared)


def copy_model(model: ir.Model) -> ir.Model:
    """A copy of ``model`` that shares nothing a pass changes.

    ``ir.Model.clone()`` shares each value's type and shape objects with the original, so setting
    a dtype on the copy (the float pass does) would retype the original too; here each value gets
    its own. A model in which a node reads a value no graph defines is refused naming that value (onnx_ir's
    own message holds the whole graph: 37 kB on Faster R-CNN).
    """
    try:
        copy = model.clone()
    except (ValueError, RuntimeError):  # onnx_ir wraps the ValueError in a RuntimeError per level it was in
        from trtforge.passes.cleanup import orphan_inputs

        orphans = orphan_inputs(model)
        if not orphans:
            raise
        value, node = orphans[0]
        raise InternalError(f"copy_model: node {node.name!r} ({node.op_type}) reads value {value.name!r}, which no "
                            "graph defines (neither a graph input, an initializer nor a node output); a graph pass "
                            f"left it behind ({len(orphans)} such value(s))") from None
    for value in _all_values(copy.graph):
        if value.type is not None:
            value.type = _copy.copy(value.type)
        if value.shape is not None:
            value.shape = value.shape.copy()
    return copy


def _all_values(graph: ir.Graph) -> list[ir.Value]:
    values = list(graph.inputs) + list(graph.initializers.values())
    for node in graph.all_nodes():
        values.extend(node.outputs)
    for sub in graph.subgraphs():
        values.extend(sub.inputs)
    return values


def fresh_ir(source: Path | onnx.ModelProto | ir.Model) -> ir.Model:
    """An ``onnx_ir`` model the caller may change: a copy of an ir.Model, else the parsed source."""
    return copy_model(source) if isinstance(source, ir.Model) else load_ir(source)
