"""Graph helpers shared by every pass: load/save, hashing, dtype summaries, Q/DQ detection.

Example:
    >>> model = load_ir(Path("m.onnx"))
    >>> dtype_summary(model)
    {'float16': 120, 'float32': 6}
"""

from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path

import onnx
import onnx_ir as ir
import onnx_ir.passes.common as common

from trtforge.core.specs import ONNX_TO_DTYPE

QDQ_OPS = frozenset({"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear"})
#: Ops whose inputs and weights the quantizer may cover; used for MAC counting too.
MAC_OPS = frozenset({"Conv", "ConvTranspose", "MatMul", "Gemm"})


def load_ir(source: Path | onnx.ModelProto | ir.Model) -> ir.Model:
    """An ``onnx_ir`` model from a path, a ModelProto or an ir.Model (returned as is)."""
    if isinstance(source, ir.Model):
        return source
    if isinstance(source, onnx.ModelProto):
        return ir.serde.deserialize_model(source)
    return ir.load(str(source))


def to_proto(model: ir.Model | onnx.ModelProto) -> onnx.ModelProto:
    return model if isinstance(model, onnx.ModelProto) else ir.serde.serialize_model(model)


def proto_bytes(model: ir.Model | onnx.ModelProto) -> bytes:
    """Serialized bytes of the model (weights inline), deterministic for the same graph."""
    return to_proto(model).SerializeToString(deterministic=True)


def model_sha256(model: ir.Model | onnx.ModelProto) -> str:
    return hashlib.sha256(proto_bytes(model)).hexdigest()


def save_model(model: ir.Model | onnx.ModelProto, path: Path) -> bytes:
    """Save as one .onnx file (no external data) atomically; returns the bytes written."""
    from trtforge.core.atomic import atomic_write_bytes

    data = proto_bytes(model)
    if len(data) >= 2**31:
        raise ValueError(f"{path}: model is {len(data)} bytes, over protobuf's 2 GiB; use external data")
    atomic_write_bytes(Path(path), data)
    return data


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
        common.ShapeInferencePass()(model)  # e.g. Q/DQ graphs written without value_info
    counts: Counter[str] = Counter()
    for node in model.graph.all_nodes():
        if node.op_type == "QuantizeLinear":
            counts["int8"] += 1
            continue
        counts[node_dtype(node) or "unknown"] += 1
    return dict(sorted(counts.items()))
