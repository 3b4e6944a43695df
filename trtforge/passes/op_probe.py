"""Single-node probe graphs: one small graph per distinct op use, in the low float type, for the builder
to try. What the installed TensorRT refuses in BF16 (HardSwish's parser check, a ConvTranspose that
Myelin cannot type) is found by building these, not by guessing.

Example:
    >>> probes = probe_graphs(reference, "bfloat16")
    >>> sorted(probes)[:1]                       # signature → (node names, ModelProto)
    ['ConvTranspose|...']
"""

from __future__ import annotations

import hashlib

import numpy as np
import onnx
import onnx_ir as ir

from trtforge.passes.float16 import CONTROL_FLOW_OPS, FIXED_FP32_INPUTS, FLOAT_TARGETS, low_tensor
from trtforge.passes.graph import to_proto

#: Opset of the probe graphs (the first whose type constraints admit bfloat16 everywhere).
PROBE_OPSET = 22


def op_signature(node: ir.Node) -> str:
    """What decides whether TensorRT takes a node: op, attributes, and each input's type, rank and constness.

    Example:
        >>> op_signature(hardswish)
        'HardSwish||FLOAT:4'
    """
    attributes = ",".join(f"{k}={_attr_text(a)}" for k, a in sorted(node.attributes.items()))
    inputs = ";".join("-" if v is None else
                      f"{v.dtype.name if v.dtype else '?'}:{len(v.shape) if v.shape is not None else '?'}"
                      f"{':const' if v.const_value is not None else ''}" for v in node.inputs)
    return f"{node.op_type}|{attributes}|{inputs}"


def _attr_text(attribute: ir.Attr) -> str:
    value = attribute.value
    if isinstance(value, ir.TensorProtocol):
        return "tensor:" + hashlib.sha256(value.tobytes()).hexdigest()[:12]
    return repr(value)


def _concrete(shape: ir.Shape | None) -> list[int] | None:
    """The shape with symbolic dims at 1 (a batch), or None when the rank is unknown."""
    if shape is None:
        return None
    return [d if isinstance(d, int) else 1 for d in shape]


def single_node_graph(node: ir.Node, dtype: str) -> onnx.ModelProto | None:
    """``node`` alone, float inputs/outputs/weights in ``dtype``; None when it cannot stand alone."""
    low = FLOAT_TARGETS[dtype]
    if node.op_type in CONTROL_FLOW_OPS or node.domain not in ("", "ai.onnx"):
        return None
    inputs, initializers, new_inputs = [], [], []
    for i, value in enumerate(node.inputs):
        if value is None:
            new_inputs.append(None)
            continue
        is_float = value.dtype == ir.DataType.FLOAT and (node.op_type, i) not in FIXED_FP32_INPUTS
        if value.const_value is not None:
            array = value.const_value.numpy()
            tensor = low_tensor(array.astype(np.float32), low, f"w{i}") if is_float else ir.tensor(array, name=f"w{i}")
            const = ir.Value(name=f"w{i}", const_value=tensor, type=ir.TensorType(tensor.dtype),
                             shape=ir.Shape(array.shape))
            initializers.append(const)
            new_inputs.append(const)
            continue
        shape = _concrete(value.shape)
        if shape is None or value.dtype is None:
            return None
        fresh = ir.Value(name=f"x{i}", type=ir.TensorType(low if is_float else value.dtype), shape=ir.Shape(shape))
        inputs.append(fresh)
        new_inputs.append(fresh)
    attributes = [a for a in node.attributes.values() if a.type not in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS)]
    copy = ir.Node("", node.op_type, inputs=new_inputs, attributes=attributes, num_outputs=len(node.outputs),
                   name="probe")
    for index, (out, original) in enumerate(zip(copy.outputs, node.outputs, strict=True)):
        out.name = f"y{index}" if original.name else ""
        if original.dtype is not None:
            out.dtype = low if original.dtype == ir.DataType.FLOAT else original.dtype
        shape = _concrete(original.shape)
        out.shape = ir.Shape(shape) if shape is not None else None
    outputs = [o for o in copy.outputs if o.name]
    graph = ir.Graph(inputs, outputs, nodes=[copy], initializers=initializers, name="probe",
                     opset_imports={"": PROBE_OPSET})
    return to_proto(ir.Model(graph, ir_version=10))


def probe_graphs(model: ir.Model, dtype: str, skip: set[str] | frozenset[str] = frozenset()
                 ) -> dict[str, tuple[list[str], onnx.ModelProto]]:
    """Per distinct signature of the top-level float nodes not in ``skip``: their names and one probe graph.

    ``model`` carries its dtypes and shapes (``passes.float16.infer_types``).
    """
    probes: dict[str, tuple[list[str], onnx.ModelProto]] = {}
    for node in model.graph:
        if node.name in skip or not any(o.dtype == ir.DataType.FLOAT for o in node.outputs):
            continue
        signature = op_signature(node)
        if signature in probes:
            probes[signature][0].append(node.name)
            continue
        graph = single_node_graph(node, dtype)
        if graph is not None:
            probes[signature] = ([node.name], graph)
    return probes
