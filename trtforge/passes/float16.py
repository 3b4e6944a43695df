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

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
import onnx_ir as ir

from trtforge.core.errors import InternalError, InvalidArgument, Unsupported
from trtforge.core.fp32_rules import (
    COMPUTED_OPERAND_OPS,
    FLOOR_DIVISION_REASON,
    FP16_RANGE_RULES,
    NORM_FINISHERS,
    NORM_HOPS,
    NORM_REDUCTIONS,
    NORMALIZATION_OPS,
    RANGE_FRAGILE_OPS,
    ROUNDING_OPS,
    computed_operand_reason,
    constant_reason,
    fragile_reason,
    norm_path_reason,
    normalization_reason,
    rounding_of_quotient_reason,
)
from trtforge.core.postprocess import NMS_PREFIX
from trtforge.passes.graph import attr as attr_value
from trtforge.passes.graph import has_qdq, infer_shapes, is_constant
from trtforge.passes.ops import MAC_OPS

FLOAT_TARGETS: dict[str, ir.DataType] = {"float16": ir.DataType.FLOAT16, "bfloat16": ir.DataType.BFLOAT16}
BF16_MIN_OPSET = 22  # first opset whose Conv/pooling/... type constraints admit bfloat16

#: Ops whose subgraphs or semantics we do not retype.
CONTROL_FLOW_OPS = frozenset({"If", "Loop", "Scan"})
#: (op_type, input index) that TensorRT needs to be a network input itself: a Cast in between is refused
#: ("the cache tensor must be a network input"), and graph inputs stay FP32, so such nodes stay FP32.
NETWORK_INPUT_OPERANDS = frozenset({("TensorScatter", 0)})
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


def _downstream_norm_path(node: ir.Node, hops: int = NORM_HOPS) -> list[ir.Node]:
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
        return normalization_reason(node.op_type)
    return None


def _rule_postprocess(node: ir.Node) -> str | None:
    if node.name and node.name.startswith(NMS_PREFIX):
        return (f"{node.op_type}: detection post-processing (NMS); its IoU and score comparisons decide which boxes "
                "survive, and must decide as FP32 does")
    return None


def _rule_control_flow(node: ir.Node) -> str | None:
    if node.op_type in CONTROL_FLOW_OPS:
        return f"{node.op_type}: subgraphs are left as exported (outer values they read are cast back to FP32)"
    return None


def _rule_other_domain(node: ir.Node) -> str | None:
    if node.domain not in ("", "ai.onnx"):
        return f"{node.op_type}: domain {node.domain!r} defines its own types; left as exported"
    return None


def _rule_type_constraint(node: ir.Node, low: str, opset: int) -> str | None:
    """Keep a node whose ONNX schema does not admit the low type for its float inputs (e.g. Celu)."""
    import onnx

    try:
        schema = onnx.defs.get_schema(node.op_type, opset, "")
    except onnx.defs.SchemaError:
        return None
    allowed = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}
    formals = list(schema.inputs)
    for index, value in enumerate(node.inputs):
        if not _is_float32(value) or not formals:
            continue
        type_str = formals[min(index, len(formals) - 1)].type_str
        if type_str in allowed and f"tensor({low})" not in allowed[type_str]:
            return f"{node.op_type}: opset {opset} admits no {low} for input {index}"
    return None


def _rule_network_input_operand(node: ir.Node) -> str | None:
    for op, index in NETWORK_INPUT_OPERANDS:
        if node.op_type == op and len(node.inputs) > index and node.inputs[index] is not None \
                and node.inputs[index].is_graph_input():
            return f"{op}: TensorRT needs input {index} to be the network input itself (the graph's FP32 input)"
    return None


def _rule_range_fragile(node: ir.Node) -> str | None:
    if node.op_type in RANGE_FRAGILE_OPS and any(_is_float32(v) for v in node.inputs):
        return fragile_reason(node.op_type)
    computed = node.op_type in COMPUTED_OPERAND_OPS and len(node.inputs) > 1 and _is_float32(node.inputs[0]) \
        and node.inputs[1] is not None and not is_constant(node.inputs[1])
    if computed:
        return computed_operand_reason(node.op_type)
    if node.op_type == "Div" and any(user.op_type in ROUNDING_OPS for out in node.outputs for user, _ in out.uses()):
        return FLOOR_DIVISION_REASON
    producer = node.inputs[0].producer() if node.op_type in ROUNDING_OPS and node.inputs[0] is not None else None
    if producer is not None and producer.op_type == "Div":
        return rounding_of_quotient_reason(node.op_type)
    return None


def _rule_out_of_range_constant(node: ir.Node) -> str | None:
    for value in node.inputs:
        if _is_float32(value) and value.const_value is not None:
            reason = constant_reason(node.op_type, _const_array(value))
            if reason:
                return reason
    if node.op_type == "Constant":
        attr = node.attributes.get("value")
        if attr is not None and isinstance(attr.value, ir.TensorProtocol):
            reason = constant_reason(node.op_type, attr.value.numpy())
            if reason:
                return reason
    return None


NODE_RULES: tuple[Callable[[ir.Node], str | None], ...] = (
    _rule_postprocess,
    _rule_other_domain,
    _rule_normalization,
    _rule_control_flow,
    _rule_network_input_operand,
    _rule_range_fragile,
    _rule_out_of_range_constant,
)
#: Rules about FP16's range (``core.fp32_rules.FP16_RANGE_RULES``); BF16 has FP32's range and skips them.
_FP16_ONLY = frozenset(rule for rule in NODE_RULES if rule.__name__.removeprefix("_rule_") in FP16_RANGE_RULES)


#: Why the nodes between a detector's last layers and the appended NMS stay FP32.
DECODING_REASON = ("box decoding before the NMS (after the model's last Conv/MatMul/Gemm): FP16 keeps half a pixel at "
                   "640, which moves IoUs across the NMS threshold")
#: At most this many nodes count as the decoding; a longer walk stops there (the rest computes in the low type).
DECODING_NODES = 64


def head_decoding(graph: ir.Graph) -> list[str]:
    """The nodes that feed the appended NMS (``passes.nms``) from the model's last MAC layers: box decoding (a
    YOLO's DFL distances to corners, an SSD's deltas against anchors) and the score activation. Empty without
    an NMS."""
    stack = [v.producer() for node in graph if node.name.startswith(NMS_PREFIX) for v in node.inputs
             if v is not None and v.producer() is not None and not v.producer().name.startswith(NMS_PREFIX)]
    found: dict[str, None] = {}
    while stack and len(found) < DECODING_NODES:
        node = stack.pop()
        if node.name in found or node.op_type in MAC_OPS or node.name.startswith(NMS_PREFIX):
            continue
        found[node.name] = None
        stack.extend(v.producer() for v in node.inputs if v is not None and v.producer() is not None)
    return list(found)


def plan_float(model: ir.Model, dtype: str = "float16", keep: Mapping[str, str] | None = None) -> FloatPlan:
    """Decide which nodes and initializers stay FP32; nothing in the model changes.

    ``keep`` adds nodes to keep (name → reason): the range probe's (``passes.range_probe``), or at
    refit the sidecar's record of what the build kept.
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
    names = {node.name for node in graph}
    fp32_nodes: dict[str, str] = {name: reason for name, reason in (keep or {}).items() if name in names}
    opset = model.opset_imports.get("", model.opset_imports.get("ai.onnx"))
    if opset is not None and dtype == "bfloat16":
        opset = max(opset, BF16_MIN_OPSET)  # BF16 graphs are converted to opset 22 first (raise_opset)
    for node in graph:
        for rule in () if node.name in fp32_nodes else NODE_RULES:
            # BF16 has FP32's range: range rules only matter for FP16.
            if rule in _FP16_ONLY and dtype == "bfloat16":
                continue
            reason = rule(node)
            if reason:
                fp32_nodes[node.name] = reason
                break
        if node.name not in fp32_nodes and opset is not None:
            reason = _rule_type_constraint(node, dtype, opset)
            if reason:
                fp32_nodes[node.name] = reason
        if node.op_type in NORM_REDUCTIONS and node.name not in fp32_nodes:
            path = _downstream_norm_path(node)
            for member in path:
                fp32_nodes.setdefault(member.name, norm_path_reason(member.op_type, node.op_type, path[-1].op_type))
    for name in head_decoding(graph):
        fp32_nodes.setdefault(name, DECODING_REASON)
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
    if node.op_type == "ConstantOfShape" and node.attributes.get("value") is None:
        # Without ``value`` it emits FP32 zeros whatever its output is typed; say the low zero.
        node.attributes["value"] = ir.AttrTensor("value", low_tensor(np.zeros(1, np.float32), low, "value"))
    if node.op_type in ("ConstantOfShape", "Constant"):
        attr = node.attributes.get("value")
        if attr is not None and isinstance(attr.value, ir.TensorProtocol) and attr.value.dtype == ir.DataType.FLOAT:
            arr = attr.value.numpy().astype(np.float32)
            node.attributes["value"] = ir.AttrTensor("value", low_tensor(arr, low, attr.value.name))
    for key in ("dtype",):  # EyeLike, RandomNormal(Like), RandomUniform(Like)
        attr = node.attributes.get(key)
        if attr is not None and attr.value == int(ir.DataType.FLOAT):
            node.attributes[key] = ir.AttrInt64(key, int(low))


def low_tensor(arr: np.ndarray, low: ir.DataType, name: str | None) -> ir.Tensor:
    if low == ir.DataType.FLOAT16:
        return ir.tensor(arr.astype(np.float16), name=name)
    import ml_dtypes

    return ir.tensor(arr.astype(ml_dtypes.bfloat16), dtype=ir.DataType.BFLOAT16, name=name)


def _defined_in(value: ir.Value, graph: ir.Graph) -> bool:
    """Whether ``value`` is an input, initializer or node output of ``graph`` itself."""
    producer = value.producer()
    if producer is not None:
        return producer.graph is graph
    return any(v is value for v in graph.inputs) or graph.initializers.get(value.name) is value


def _cast_outer_reads(node: ir.Node, graph: ir.Graph, low: ir.DataType,
                      cast_back: Callable[[ir.Value], ir.Value]) -> None:
    """A Scan/Loop/If body is left as exported: outer values it reads that became ``low`` are read as FP32."""
    for attribute in node.attributes.values():
        bodies = [attribute.value] if attribute.type == ir.AttributeType.GRAPH else (
            list(attribute.value) if attribute.type == ir.AttributeType.GRAPHS else [])
        for body in bodies:
            for inner in ir.traversal.RecursiveGraphIterator(body):
                for i, value in enumerate(inner.inputs):
                    if value is not None and value.dtype == low and _defined_in(value, graph):
                        inner.replace_input_with(i, cast_back(value))


def apply_float(model: ir.Model, plan: FloatPlan) -> ir.Model:
    """Apply ``plan`` in place: cast initializers, retype values, insert Casts; I/O stays FP32."""
    low = FLOAT_TARGETS[plan.dtype]
    graph = model.graph
    if low == ir.DataType.BFLOAT16 and model.opset_imports.get("", BF16_MIN_OPSET) < BF16_MIN_OPSET:
        # Relabelling the opset would change meanings (opset 13 moved Squeeze's axes to an input, 18 ReduceMean's).
        raise InternalError(f"apply_float: a BF16 plan needs the graph converted to opset {BF16_MIN_OPSET} first "
                            "(float16.raise_opset, as convert_float and passes.process do)")
    low_inits: set[str] = set()
    for name, value in graph.initializers.items():
        if _is_float32(value) and name not in plan.fp32_initializers and value.const_value is not None:
            value.const_value = low_tensor(_const_array(value).astype(np.float32), low, name)
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
        if node.op_type in CONTROL_FLOW_OPS:
            _cast_outer_reads(node, graph, low, lambda value, at=node: cast_of(value, ir.DataType.FLOAT, at))
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


def raise_opset(model: ir.Model, version: int = BF16_MIN_OPSET) -> ir.Model:
    """``model`` converted to opset ``version`` by ONNX's version converter: every node keeps its meaning and
    its name (an opset-12 ``Squeeze`` gets its ``axes`` as an input, as opset 13 wants). BF16 needs opset 22,
    the first whose Conv, pooling, ... admit bfloat16. Returns ``model`` itself when already there, else a
    new model; a graph the converter cannot bring there is refused in one line.

    Example:
        >>> raise_opset(load_ir(Path("rec_opset12.onnx"))).opset_imports[""]
        22
    """
    current = model.opset_imports.get("", model.opset_imports.get("ai.onnx"))
    if current is None or current >= version:
        return model
    from onnx import version_converter

    try:
        proto = version_converter.convert_version(ir.to_proto(model), version)
    except Exception as exc:  # noqa: BLE001 - the C++ converter raises RuntimeError/ValueError/ConvertError
        reason = " ".join(str(exc).split())[:300]
        raise Unsupported(f"BF16 needs the graph at opset {version} (the first whose Conv, pooling, ... admit "
                          f"bfloat16), and ONNX's version converter cannot bring this opset-{current} graph there "
                          f"({reason}); build fp16, or export the model at opset {version}") from exc
    return ir.from_proto(proto)


def infer_types(model: ir.Model) -> ir.Model:
    """Fill in every value's dtype (ONNX shape inference), so the pass sees each float edge."""
    failure = infer_shapes(model)
    # An omitted optional output (RNN/GRU/LSTM's Y named '') has no type and needs none.
    missing = [v.name for n in model.graph for v in n.outputs if v.dtype is None and (v.name or v.uses())]
    if missing:
        raise InvalidArgument(
            f"cannot infer the dtype of {len(missing)} value(s) (first: {missing[:3]})"
            + (f": ONNX shape inference failed ({failure})" if failure else "")
            + "; re-export the model with value_info for them"
        )
    return model


def convert_float(model: ir.Model, dtype: str = "float16") -> ir.Model:
    """Plan and apply the float pass; returns the model, now FP16/BF16 inside, FP32 at the edges (BF16: a new
    model when the graph had to be converted to opset 22 first, ``raise_opset``).

    Example:
        >>> convert_float(load_ir(Path("m.onnx")), "bfloat16")
    """
    if dtype == "bfloat16":
        model = raise_opset(model, BF16_MIN_OPSET)
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
        if node.op_type == "Cast" and attr_value(node, "to") == int(half):
            node.attributes["to"] = ir.AttrInt64("to", int(full))
        tensor = attr_value(node, "value")
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
