"""Cast a graph to FP16 or BF16, keeping FP32 graph I/O and FP32 islands where FP16 breaks numbers.

The plan is computed once (which nodes stay FP32 and why) and then applied with explicit Cast
nodes, so the graph is strongly typed: TensorRT builds exactly the precision written here.

Example:
    >>> model = load_ir(Path("m.onnx"))
    >>> plan = plan_float(model, "float16")
    >>> plan.fp32_nodes                       # {'node_17': 'LayerNormalization: ...', ...}
    >>> apply_float(model, plan)              # or convert_float(model, "float16")
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import onnx_ir as ir
import onnx_ir.passes.common as common

from trtforge.core.errors import InvalidArgument
from trtforge.passes.graph import attr as attribute
from trtforge.passes.graph import has_qdq, layer_label
from trtforge.passes.ops import NORMALIZATION_OPS

FLOAT_TARGETS: dict[str, ir.DataType] = {"float16": ir.DataType.FLOAT16, "bfloat16": ir.DataType.BFLOAT16}
FP16_MAX = 65504.0
FP16_TINY = 2.0**-24  # smallest FP16 subnormal; smaller non-zero constants flush to 0
BF16_MIN_OPSET = 22  # first opset whose Conv/pooling/... type constraints admit bfloat16
SMALL_CONSTANT = 16  # constants up to this many elements are scalars/epsilons, checked for underflow

#: Reductions that, when they feed a square root or reciprocal, form a hand-written normalisation.
NORM_REDUCTIONS = frozenset({"ReduceMean", "ReduceSum", "ReduceSumSquare", "ReduceL2"})
NORM_FINISHERS = frozenset({"Sqrt", "Reciprocal"})
#: Ops whose subgraphs or semantics we do not retype.
CONTROL_FLOW_OPS = frozenset({"If", "Loop", "Scan"})
#: (op_type, input index) that ONNX requires to stay float32 whatever the data type.
FIXED_FP32_INPUTS = frozenset({("Resize", 2), ("Upsample", 1)})


class QdqGraphError(InvalidArgument):
    """The graph already contains Q/DQ nodes, so it is quantized; the float pass would break it."""


@dataclass(frozen=True)
class FloatPlan:
    """Which nodes stay FP32 (name → reason) and which initializers keep FP32 (name → reason)."""

    dtype: str
    fp32_nodes: dict[str, str] = field(default_factory=dict)
    fp32_initializers: dict[str, str] = field(default_factory=dict)


def _is_float32(value: ir.Value | None) -> bool:
    return value is not None and value.dtype == ir.DataType.FLOAT


def _const_array(value: ir.Value) -> np.ndarray | None:
    tensor = value.const_value
    if tensor is None:
        return None
    return tensor.numpy()


def _out_of_fp16_range(arr: np.ndarray) -> str | None:
    if arr.dtype != np.float32 or arr.size == 0:
        return None
    finite = arr[np.isfinite(arr)]
    if finite.size == 0:
        return None
    big = float(np.abs(finite).max())
    if big > FP16_MAX:
        return f"constant with |x| = {big:.3g} > FP16 max {FP16_MAX:g}"
    # Underflow matters for scalars such as a normalisation epsilon, or when every value would
    # flush to zero; a weight tensor losing a few tiny entries keeps its numbers.
    nonzero = np.abs(finite[finite != 0])
    if nonzero.size and float(nonzero.max()) < FP16_TINY:
        return f"constant with all |x| < FP16 subnormal min {FP16_TINY:.3g}"
    if nonzero.size and arr.size <= SMALL_CONSTANT and float(nonzero.min()) < FP16_TINY:
        return f"constant with |x| = {float(nonzero.min()):.3g} < FP16 subnormal min {FP16_TINY:.3g}"
    return None


def _downstream_norm_path(node: ir.Node, hops: int = 5) -> list[ir.Node]:
    """Nodes from a reduction to a Sqrt/Reciprocal within ``hops``; empty when none is reached."""
    frontier: list[tuple[ir.Node, list[ir.Node]]] = [(node, [node])]
    for _ in range(hops):
        nxt = []
        for current, path in frontier:
            for out in current.outputs:
                for user, _ in out.uses():
                    if user.op_type in NORM_FINISHERS:
                        return [*path, user]
                    nxt.append((user, [*path, user]))
        frontier = nxt
    return []


#: Rules that keep a node in FP32: ((predicate(node) -> reason | None), ...). Data, in order.
def _rule_normalization(node: ir.Node) -> str | None:
    if node.op_type in NORMALIZATION_OPS:
        return f"{node.op_type}: normalisation reductions lose precision in FP16"
    return None


def _rule_control_flow(node: ir.Node) -> str | None:
    if node.op_type in CONTROL_FLOW_OPS:
        return f"{node.op_type}: subgraphs are left as exported"
    return None


def _rule_out_of_range_constant(node: ir.Node) -> str | None:
    for value in node.inputs:
        if _is_float32(value) and value.const_value is not None:
            reason = _out_of_fp16_range(_const_array(value))
            if reason:
                return reason
    if node.op_type == "Constant":
        attr = node.attributes.get("value")
        if attr is not None and isinstance(attr.value, ir.TensorProtocol):
            reason = _out_of_fp16_range(attr.value.numpy())
            if reason:
                return reason
    return None


NODE_RULES: tuple[Callable[[ir.Node], str | None], ...] = (
    _rule_normalization,
    _rule_control_flow,
    _rule_out_of_range_constant,
)


def _kept_by_pattern(node: ir.Node, patterns: tuple[str, ...]) -> str | None:
    """The first of ``patterns`` (op type, or a regex on the node name, first output or layer label) ``node`` matches."""
    for pattern in patterns:
        if pattern == node.op_type:
            return pattern
        names = (node.name, node.outputs[0].name if node.outputs else "", layer_label(node))
        if any(re.search(pattern, name or "") for name in names):
            return pattern
    return None


def plan_float(model: ir.Model, dtype: str = "float16", keep: tuple[str, ...] = ()) -> FloatPlan:
    """Decide which nodes and initializers stay FP32; nothing in the model changes.

    ``keep``: patterns of nodes to keep in FP32 as well (``CompileConfig.keep_fp32``).
    """
    if dtype not in FLOAT_TARGETS:
        raise InvalidArgument(f"unknown float dtype {dtype!r}; choose one of {sorted(FLOAT_TARGETS)}")
    if has_qdq(model):
        raise QdqGraphError(
            "the graph already contains QuantizeLinear/DequantizeLinear nodes, so it is quantized. "
            "Build it with precision='int8' handled by its own Q/DQ (pass the quantized graph as is "
            "with precision='fp32'), or give trtforge the float model."
        )
    graph = model.graph
    fp32_nodes: dict[str, str] = {}
    for node in graph:
        for rule in NODE_RULES:
            # BF16 has FP32's range: range rules only matter for FP16.
            if rule is _rule_out_of_range_constant and dtype == "bfloat16":
                continue
            reason = rule(node)
            if reason:
                fp32_nodes[node.name] = reason
                break
        pattern = _kept_by_pattern(node, keep) if keep and node.name not in fp32_nodes else None
        if pattern is not None:
            fp32_nodes[node.name] = f"kept in FP32 by keep_fp32 pattern {pattern!r}"
        if node.op_type in NORM_REDUCTIONS and node.name not in fp32_nodes:
            path = _downstream_norm_path(node)
            for member in path:
                fp32_nodes.setdefault(member.name, f"part of a normalisation ({node.op_type} → {path[-1].op_type})")
    fp32_inits: dict[str, str] = {}
    for name, value in graph.initializers.items():
        if not _is_float32(value):
            continue
        users = [user for user, _ in value.uses()]
        if any(user.name in fp32_nodes for user in users) and not all(u.name in fp32_nodes for u in users):
            fp32_inits[name] = "shared by FP32 and reduced-precision nodes"
        elif users and all(user.name in fp32_nodes for user in users):
            fp32_inits[name] = "only used by FP32 nodes"
    return FloatPlan(dtype=dtype, fp32_nodes=fp32_nodes, fp32_initializers=fp32_inits)


def _cast(value: ir.Value, to: ir.DataType, name: str) -> ir.Node:
    node = ir.Node("", "Cast", inputs=[value], attributes=[ir.AttrInt64("to", int(to))], name=name)
    node.outputs[0].name = name + "_out"
    node.outputs[0].dtype = to
    node.outputs[0].shape = value.shape
    return node


def _retype_node_attributes(node: ir.Node, low: ir.DataType) -> None:
    """Attributes that name a float dtype or hold a float tensor follow the node's precision."""
    if node.op_type == "Cast" and node.attributes.get("to") is not None:
        if node.attributes["to"].value == int(ir.DataType.FLOAT):
            node.attributes["to"] = ir.AttrInt64("to", int(low))
    if node.op_type in ("ConstantOfShape", "Constant"):
        attr = node.attributes.get("value")
        if attr is not None and isinstance(attr.value, ir.TensorProtocol) and attr.value.dtype == ir.DataType.FLOAT:
            arr = attr.value.numpy().astype(np.float32)
            node.attributes["value"] = ir.AttrTensor("value", _low_tensor(arr, low, attr.value.name))
    for key in ("dtype",):  # EyeLike, RandomNormal(Like), RandomUniform(Like)
        attr = node.attributes.get(key)
        if attr is not None and attr.value == int(ir.DataType.FLOAT):
            node.attributes[key] = ir.AttrInt64(key, int(low))


def _low_tensor(arr: np.ndarray, low: ir.DataType, name: str | None) -> ir.Tensor:
    if low == ir.DataType.FLOAT16:
        return ir.tensor(arr.astype(np.float16), name=name)
    import ml_dtypes

    return ir.tensor(arr.astype(ml_dtypes.bfloat16), dtype=ir.DataType.BFLOAT16, name=name)


def apply_float(model: ir.Model, plan: FloatPlan) -> ir.Model:
    """Apply ``plan`` in place: cast initializers, retype values, insert Casts; I/O stays FP32."""
    low = FLOAT_TARGETS[plan.dtype]
    graph = model.graph
    if low == ir.DataType.BFLOAT16 and model.opset_imports.get("", 0) < BF16_MIN_OPSET:
        # Opset 22 only widens type constraints (Conv, pooling, ... accept bfloat16); semantics are unchanged.
        model.opset_imports[""] = BF16_MIN_OPSET
    low_inits: set[str] = set()
    for name, value in graph.initializers.items():
        if _is_float32(value) and name not in plan.fp32_initializers and value.const_value is not None:
            value.const_value = _low_tensor(_const_array(value).astype(np.float32), low, name)
            value.dtype = low
            low_inits.add(name)
    graph_inputs = {id(v) for v in graph.inputs}
    casts: dict[tuple[int, int], ir.Value] = {}
    counter = 0

    def cast_of(value: ir.Value, to: ir.DataType, before: ir.Node) -> ir.Value:
        nonlocal counter
        key = (id(value), int(to))
        if key not in casts:
            counter += 1
            node = _cast(value, to, f"trtforge_cast_{counter}_{to.name.lower()}")
            producer = value.producer()
            if producer is None or id(value) in graph_inputs:
                graph.insert_before(graph[0], node)
            else:
                graph.insert_after(producer, node)
            casts[key] = node.outputs[0]
        return casts[key]

    # Values' current float dtype as we sweep in topological order.
    for node in list(graph):
        if node.name.startswith("trtforge_cast_"):
            continue
        keep = node.name in plan.fp32_nodes
        compute = ir.DataType.FLOAT if keep else low
        for i, value in enumerate(node.inputs):
            if value is None or value.dtype not in (ir.DataType.FLOAT, low):
                continue
            want = ir.DataType.FLOAT if (node.op_type, i) in FIXED_FP32_INPUTS else compute
            if value.dtype != want:
                node.replace_input_with(i, cast_of(value, want, node))
        if not keep:
            _retype_node_attributes(node, low)
            for out in node.outputs:
                if out.dtype == ir.DataType.FLOAT:
                    out.dtype = low
    # Graph outputs stay FP32: rename the low-precision value and cast it back under the old name.
    for index, value in enumerate(list(graph.outputs)):
        if value.dtype != low:
            continue
        name = value.name
        value.name = f"{name}_{plan.dtype}"
        node = _cast(value, ir.DataType.FLOAT, f"trtforge_output_cast_{index}")
        node.outputs[0].name = name
        graph.append(node)
        graph.outputs[index] = node.outputs[0]
    return model


def infer_types(model: ir.Model) -> ir.Model:
    """Fill in every value's dtype (ONNX shape inference), so the pass sees each float edge."""
    common.ShapeInferencePass()(model)
    missing = [v.name for n in model.graph for v in n.outputs if v.dtype is None]
    if missing:
        raise InvalidArgument(
            f"cannot infer the dtype of {len(missing)} value(s) (first: {missing[:3]}); "
            "run onnx.shape_inference or re-export the model with value_info"
        )
    return model


def convert_float(model: ir.Model, dtype: str = "float16") -> ir.Model:
    """Plan and apply the float pass; returns the same model, now FP16/BF16 inside, FP32 at the edges.

    Example:
        >>> convert_float(load_ir(Path("m.onnx")), "bfloat16")
    """
    infer_types(model)
    return apply_float(model, plan_float(model, dtype))


def upcast_float16(model: ir.Model) -> ir.Model:
    """Every FP16 tensor, cast, constant and Q/DQ scale of ``model`` back to FP32, in place.

    ONNX Runtime's CPU provider mis-evaluates Q/DQ graphs with FP16 scales
    (``trtforge.core.ort_session``); the upcast graph simulates the same INT8 grid with FP32 scales,
    as the quantizer's accuracy report does. Layer names stay, so it lines up with the FP32 reference.

    Example:
        >>> sim = upcast_float16(load_ir(Path("lite0_int8.onnx")))
        >>> dtype_summary(sim).get("float16", 0)
        0
    """
    half, full = ir.DataType.FLOAT16, ir.DataType.FLOAT
    for value in model.graph.initializers.values():
        if value.dtype == half and value.const_value is not None:
            value.const_value = ir.tensor(value.const_value.numpy().astype(np.float32), name=value.name)
            value.dtype = full
    for node in model.graph.all_nodes():
        if node.op_type == "Cast" and attribute(node, "to") == int(half):
            node.attributes["to"] = ir.AttrInt64("to", int(full))
        tensor = attribute(node, "value")
        if node.op_type in ("Constant", "ConstantOfShape") and isinstance(tensor, ir.TensorProtocol) \
                and tensor.dtype == half:
            node.attributes["value"] = ir.AttrTensor("value", ir.tensor(tensor.numpy().astype(np.float32),
                                                                         name=tensor.name))
        for out in node.outputs:
            if out.dtype == half:
                out.dtype = full
    for value in model.graph.inputs:
        if value.dtype == half:
            value.dtype = full
    return model
