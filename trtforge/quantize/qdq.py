"""The Q/DQ insertion pass: apply a frozen ``QuantPlan`` to an FP32 or FP16 graph.

Activations get QuantizeLinear → DequantizeLinear (per tensor, symmetric, zero point 0);
weights become INT8 initializers behind a DequantizeLinear (per output channel). Graph I/O and
every layer outside the plan keep their float type. Scales take the dtype of the tensor they
quantize: FP16 in the FP16 graph for TensorRT, FP32 in the graph ONNX Runtime simulates.

Example:
    >>> qdq_fp16 = apply_plan(fp16_proto, plan)     # for TensorRT (opset ≥ 19)
    >>> qdq_fp32 = apply_plan(fp32_proto, plan)     # for ONNX Runtime accuracy checks
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from trtforge.core.errors import InvalidArgument
from trtforge.quantize.graph_tools import GraphIndex, ensure_opset
from trtforge.quantize.plan import QuantInput, QuantPlan

FLOAT_TYPES = {TensorProto.FLOAT: np.float32, TensorProto.FLOAT16: np.float16}


class PlanMismatchError(InvalidArgument):
    """The plan names a layer or weight that the graph does not have."""


def _value_types(model: onnx.ModelProto) -> dict[str, int]:
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # shape inference is best effort; unknown types fall back to the node's weight
        inferred = model
    types: dict[str, int] = {}
    for vi in [*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output]:
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
            types[vi.name] = vi.type.tensor_type.elem_type
    for init in inferred.graph.initializer:
        types[init.name] = init.data_type
    return types


def quantize_weight(weight: np.ndarray, q: QuantInput) -> np.ndarray:
    """INT8 values of ``weight`` on the plan's grid (symmetric, clipped to ±127)."""
    scales = np.asarray(q.scales, dtype=np.float32)
    if q.axis is not None:
        shape = [1] * weight.ndim
        shape[q.axis] = -1
        scales = scales.reshape(shape)
    else:
        scales = scales.reshape(())
    return np.clip(np.round(weight.astype(np.float32) / scales), -127, 127).astype(np.int8)


def apply_plan(model: onnx.ModelProto, plan: QuantPlan) -> onnx.ModelProto:
    """A copy of ``model`` with the plan's Q/DQ nodes; no other node changes."""
    model = ensure_opset(model, 19)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    index = GraphIndex(out)
    types = _value_types(out)
    by_output = {node.output[0]: node for node in graph.node if node.output}
    new_inits: list[TensorProto] = []
    pending: dict[str, list[onnx.NodeProto]] = {}  # consumer node name → Q/DQ nodes to emit first
    weight_nodes: list[onnx.NodeProto] = []
    act_cache: dict[tuple[str, float], str] = {}
    weight_cache: dict[tuple[str, tuple], str] = {}
    serial = 0

    for layer in plan.layers:
        node = by_output.get(layer.output)
        # The float pass renames a graph output's producer (``y`` → ``y_float16`` + Cast back to ``y``).
        while node is not None and node.op_type != layer.op_type and node.op_type == "Cast":
            node = index.producer.get(node.input[0])
        if node is None or node.op_type != layer.op_type:
            raise PlanMismatchError(
                f"plan layer {layer.label!r} (output {layer.output!r}) is not in this graph; "
                "compute the plan on the same model you apply it to"
            )
        for q in layer.inputs:
            name = node.input[q.index]
            if q.is_weight:
                value = index.constant(name)
                if value is None:
                    raise PlanMismatchError(f"weight {name!r} of {layer.label!r} is not a constant in this graph")
                key = (name, q.scales)
                if key not in weight_cache:
                    serial += 1
                    dtype = np.float16 if value.dtype == np.float16 else np.float32
                    base = f"{name}__w{serial}"
                    shape = (len(q.scales),) if q.axis is not None else ()
                    new_inits += [
                        numpy_helper.from_array(quantize_weight(value, q), base + "_int8"),
                        numpy_helper.from_array(np.asarray(q.scales, dtype=dtype).reshape(shape), base + "_scale"),
                        numpy_helper.from_array(np.zeros(shape, dtype=np.int8), base + "_zp"),
                    ]
                    kwargs = {"axis": q.axis} if q.axis is not None else {}
                    weight_nodes.append(helper.make_node(
                        "DequantizeLinear", [base + "_int8", base + "_scale", base + "_zp"], [base + "_dq"],
                        name=base + "_DequantizeLinear", **kwargs,
                    ))
                    weight_cache[key] = base + "_dq"
                node.input[q.index] = weight_cache[key]
                continue
            key = (name, q.scales[0])
            if key not in act_cache:
                serial += 1
                np_dtype = FLOAT_TYPES.get(types.get(name, TensorProto.FLOAT), np.float32)
                base = f"{name}__a{serial}"
                new_inits += [
                    numpy_helper.from_array(np.asarray(q.scales[0], dtype=np_dtype), base + "_scale"),
                    numpy_helper.from_array(np.asarray(0, dtype=np.int8), base + "_zp"),
                ]
                pending.setdefault(node.name, []).extend([
                    helper.make_node("QuantizeLinear", [name, base + "_scale", base + "_zp"], [base + "_q"],
                                     name=base + "_QuantizeLinear"),
                    helper.make_node("DequantizeLinear", [base + "_q", base + "_scale", base + "_zp"],
                                     [base + "_dq"], name=base + "_DequantizeLinear"),
                ])
                act_cache[key] = base + "_dq"
            node.input[q.index] = act_cache[key]

    nodes = list(weight_nodes)
    for node in graph.node:
        nodes.extend(pending.get(node.name, ()))
        nodes.append(node)
    del graph.node[:]
    graph.node.extend(nodes)
    graph.initializer.extend(new_inits)
    # Initializers no node reads any more (float weights replaced by INT8 ones) are dropped.
    used = {name for node in graph.node for name in node.input}
    used |= {o.name for o in graph.output}
    keep = [t for t in graph.initializer if t.name in used]
    del graph.initializer[:]
    graph.initializer.extend(keep)
    return out
