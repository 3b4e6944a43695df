"""Small ONNX graph helpers the quantizer needs (maps, constants, layer names, ORT sessions).

These work on ``onnx.ModelProto``; they live here until ``trtforge.passes.graph`` offers them.

Example:
    >>> index = GraphIndex(proto)
    >>> index.constant("conv.weight").shape
    (32, 3, 3, 3)
    >>> index.consumers["x"]                 # [(node, input index), ...]
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable

import numpy as np
import onnx
from onnx import numpy_helper

#: Ops whose inputs and weights the quantizer covers (the MAC ops of the issue).
MAC_OPS = frozenset({"Conv", "ConvTranspose", "MatMul", "Gemm"})
QDQ_OPS = frozenset({"QuantizeLinear", "DequantizeLinear"})
#: Ops that only move or reshape data; walking through them keeps "the same tensor".
SHAPE_OPS = frozenset({"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Cast"})
DEFAULT_OPSET = 19


class GraphIndex:
    """Producer/consumer maps and constant lookups over one graph (built once, read-only)."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self.model = model
        graph = model.graph
        self.initializers: dict[str, onnx.TensorProto] = {t.name: t for t in graph.initializer}
        self.producer: dict[str, onnx.NodeProto] = {}
        self.consumers: dict[str, list[tuple[onnx.NodeProto, int]]] = defaultdict(list)
        self.constant_nodes: dict[str, onnx.NodeProto] = {}
        for node in graph.node:
            for out in node.output:
                if out:
                    self.producer[out] = node
            for idx, name in enumerate(node.input):
                if name:
                    self.consumers[name].append((node, idx))
            if node.op_type == "Constant":
                self.constant_nodes[node.output[0]] = node
        self.graph_inputs = [i.name for i in graph.input if i.name not in self.initializers]
        self.graph_outputs = [o.name for o in graph.output]
        self._cache: dict[str, np.ndarray | None] = {}

    def constant(self, name: str) -> np.ndarray | None:
        """The value of ``name`` when it is an initializer or a Constant output (through Cast)."""
        if name in self._cache:
            return self._cache[name]
        value: np.ndarray | None = None
        if name in self.initializers:
            value = numpy_helper.to_array(self.initializers[name])
        elif name in self.constant_nodes:
            for attr in self.constant_nodes[name].attribute:
                if attr.name == "value":
                    value = numpy_helper.to_array(attr.t)
        elif name in self.producer and self.producer[name].op_type in ("Cast", "Identity"):
            src = self.constant(self.producer[name].input[0])
            if src is not None and self.producer[name].op_type == "Cast":
                to = next(a.i for a in self.producer[name].attribute if a.name == "to")
                src = src.astype(onnx.helper.tensor_dtype_to_np_dtype(to))
            value = src
        self._cache[name] = value
        return value

    def is_constant(self, name: str) -> bool:
        return self.constant(name) is not None


def attr(node: onnx.NodeProto, name: str, default=None):
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


_SCOPE = re.compile(r"([\w.]+): (?!aten\.)[\w.]+")


def layer_label(node: onnx.NodeProto, index: GraphIndex | None = None) -> str:
    """A readable name: the weight's name, else the torch module path from export metadata, else the node."""
    if index is not None and node.op_type in MAC_OPS:
        for name in node.input[1:2]:
            if name in index.initializers and not re.match(r"(val|_val|onnx::|const)_?\d*", name):
                return re.sub(r"\.weight$", "", name)
    for prop in node.metadata_props:
        if prop.key == "namespace":
            parts = [m.group(1) for m in _SCOPE.finditer(prop.value) if not m.group(1).startswith("aten")]
            if parts:
                return parts[-1]
    return node.name or node.output[0]


def ensure_node_names(model: onnx.ModelProto) -> onnx.ModelProto:
    """Give every node a unique name (in place); the plan addresses nodes by name."""
    seen: set[str] = set()
    for i, node in enumerate(model.graph.node):
        name = node.name or f"{node.op_type}_{i}"
        while name in seen:
            name = f"{name}_{i}"
        node.name = name
        seen.add(name)
    return model


def opset_version(model: onnx.ModelProto) -> int:
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            return int(imp.version)
    return 1


def ensure_opset(model: onnx.ModelProto, version: int = DEFAULT_OPSET) -> onnx.ModelProto:
    """The model at opset ≥ ``version`` (FP16 Q/DQ scales need 19); converts when lower."""
    if opset_version(model) >= version:
        return model
    try:
        return onnx.version_converter.convert_version(model, version)
    except Exception as exc:
        raise ValueError(
            f"the graph is at opset {opset_version(model)} and could not be converted to opset {version}, "
            f"which FP16 Q/DQ scales need ({exc}). Re-export the model with opset_version>={version}."
        ) from exc


def with_outputs(model: onnx.ModelProto, names: Iterable[str]) -> onnx.ModelProto:
    """A copy of ``model`` that also returns the tensors ``names`` (for observers)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    existing = {o.name for o in out.graph.output}
    for name in names:
        if name not in existing:
            out.graph.output.append(onnx.helper.make_empty_tensor_value_info(name))
            existing.add(name)
    return out


def ort_providers() -> list[str]:
    """CUDA first when ONNX Runtime offers it, then CPU."""
    import onnxruntime as ort

    available = ort.get_available_providers()
    return [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider") if p in available]


def ort_session(model: onnx.ModelProto, providers: list[str] | None = None, threads: int | None = None):
    """An ONNX Runtime session from an in-memory model, through ``trtforge.core.ort_session`` (known-bad
    optimisers off)."""
    from trtforge.core.ort_session import session

    return session(model.SerializeToString(), providers=providers or ort_providers(), threads=threads)


def input_specs(model: onnx.ModelProto) -> list[tuple[str, np.dtype, tuple[int | None, ...]]]:
    """(name, numpy dtype, shape with None for symbolic dims) for each real graph input."""
    inits = {t.name for t in model.graph.initializer}
    specs = []
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type))
        shape = tuple(d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim)
        specs.append((vi.name, dtype, shape))
    return specs
