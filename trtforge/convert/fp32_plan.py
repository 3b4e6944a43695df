"""The direct path's FP32 plan: the one FP32 rule set (``core.fp32_rules``) applied to FX nodes, before conversion.

Each FX node's ATen op is mapped to the op kind the ONNX float pass sees (``ATEN_KINDS``: ONNX op type names), and
the same rules keep the same kinds in FP32 with the same reasons: normalisations, hand-written normalisations (a
reduction that feeds a Sqrt/Reciprocal, and the nodes on the way), and under FP16 the range-fragile ops, computed
divisors and exponents, floor divisions and out-of-range constants. The range probe runs the exported graph on the
example inputs in PyTorch and keeps what reaches the low type's limit, as ``passes.range_probe`` does in ONNX
Runtime. Converters read the plan; ``lower_graph`` runs a kept node's converter in FP32.

Example:
    >>> plan = plan_fp32(program.graph_module.graph, constants, "float16", (x,))
    >>> plan.nodes
    {'native_layer_norm': 'LayerNormalization: normalisation reductions lose precision in FP16', ...}
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import torch

from trtforge.convert.registry import target_name
from trtforge.core.fp32_rules import (
    COMPUTED_OPERAND_OPS,
    FLOOR_DIVISION_REASON,
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
    range_reason,
    rounding_of_quotient_reason,
    softmax_reason,
)

#: ATen op (``aten.NAME``, any overload) → the op kind the ONNX exporter writes for it (an ONNX op type).
ATEN_KINDS: dict[str, str] = {
    "native_layer_norm": "LayerNormalization", "native_group_norm": "GroupNormalization",
    "mean": "ReduceMean", "var": "ReduceMean", "sum": "ReduceSum", "prod": "ReduceProd", "amax": "ReduceMax",
    "amin": "ReduceMin", "sqrt": "Sqrt", "rsqrt": "Sqrt", "reciprocal": "Reciprocal", "div": "Div", "pow": "Pow",
    "remainder": "Mod", "fmod": "Mod", "tan": "Tan", "floor": "Floor", "ceil": "Ceil", "round": "Round",
    "_softmax": "Softmax", "softmax": "Softmax", "_log_softmax": "LogSoftmax", "log_softmax": "LogSoftmax",
    "add": "Add", "sub": "Sub", "mul": "Mul", "where": "Where", "mm": "MatMul", "bmm": "MatMul", "matmul": "MatMul",
    "addmm": "Gemm", "convolution": "Conv", "gelu": "Gelu", "relu": "Relu", "sigmoid": "Sigmoid", "tanh": "Tanh",
    "erf": "Erf", "exp": "Exp", "log": "Log", "abs": "Abs", "neg": "Neg", "view": "Reshape", "_unsafe_view": "Reshape",
    "reshape": "Reshape", "permute": "Transpose", "transpose": "Transpose", "expand": "Expand", "cat": "Concat",
    "slice": "Slice", "unsqueeze": "Unsqueeze", "squeeze": "Squeeze", "clone": "Identity",
    "scaled_dot_product_attention": "Attention", "avg_pool2d": "AveragePool", "max_pool2d_with_indices": "MaxPool",
}
#: Parts of a converter's own decomposition the plan can keep on their own: (ATen op, part) → op kind.
PARTS: dict[tuple[str, str], str] = {("scaled_dot_product_attention", "mask"): "Where",
                                      ("scaled_dot_product_attention", "softmax"): "Softmax"}
#: The additive bias an attention writes where its boolean mask is False (as torch.onnx writes it).
MASK_FILL = torch.finfo(torch.float32).min


@dataclass(frozen=True)
class Fp32Plan:
    """Which FX nodes (``name``) and parts of them (``name:part``) stay FP32, each with the rule that fired."""

    dtype: str
    nodes: Mapping[str, str] = field(default_factory=dict)

    def keeps(self, node: torch.fx.Node, part: str | None = None) -> bool:
        return (node.name if part is None else f"{node.name}:{part}") in self.nodes


def op_kind(node: torch.fx.Node) -> str:
    """The op kind of an FX call (``aten.div.Tensor`` → ``Div``; an op not in ``ATEN_KINDS``: its ATen name)."""
    name = target_name(node).removeprefix("aten.").split(".")[0]
    if name == "linalg_vector_norm":
        return "ReduceL1" if len(node.args) > 1 and float(node.args[1]) == 1.0 else "ReduceL2"
    return ATEN_KINDS.get(name, name)


def _val(arg):
    return arg.meta.get("val") if isinstance(arg, torch.fx.Node) else None


def _computes_float(node: torch.fx.Node) -> bool:
    """Whether a float value goes in or out of ``node`` (True where no example value says: the rules then apply)."""
    values = [v for v in [_val(node), *(_val(a) for a in node.all_input_nodes)] if isinstance(v, torch.Tensor)]
    return not values or any(v.dtype.is_floating_point for v in values)


def _computed(arg) -> bool:
    return isinstance(arg, torch.fx.Node) and not arg.meta.get("trtforge_const")


def readers(node: torch.fx.Node) -> list[torch.fx.Node]:
    """The nodes that read ``node``'s values, through the ``getitem`` of a multi-output op (no node of the ONNX
    graph)."""
    return [r for user in node.users for r in (readers(user) if user.target is operator.getitem else [user])]


def _rule_range_fragile(node: torch.fx.Node, kind: str) -> str | None:
    if kind in RANGE_FRAGILE_OPS:
        return fragile_reason(kind)
    first = _val(node.args[0]) if node.args else None
    if kind in COMPUTED_OPERAND_OPS and len(node.args) > 1 and _computed(node.args[1]) \
            and isinstance(first, torch.Tensor) and first.dtype == torch.float32:
        return computed_operand_reason(kind)
    floor_mode = node.kwargs.get("rounding_mode", node.args[2] if len(node.args) > 2 else None) in ("floor", "trunc")
    if kind == "Div" and (floor_mode or any(op_kind(u) in ROUNDING_OPS for u in readers(node))):
        return FLOOR_DIVISION_REASON
    if kind in ROUNDING_OPS and node.args and isinstance(node.args[0], torch.fx.Node) \
            and node.args[0].op == "call_function" and op_kind(node.args[0]) == "Div":
        return rounding_of_quotient_reason(kind)
    return None


def _rule_constant(node: torch.fx.Node, kind: str, constants: Mapping[str, torch.Tensor]) -> str | None:
    """A float32 constant the node reads (a weight, a folded value, a scalar) that FP16 cannot hold."""
    for arg in node.args:
        if isinstance(arg, float):
            value = np.array([arg], np.float32)
        elif isinstance(arg, torch.fx.Node) and arg.name in constants:
            value = constants[arg.name].detach().numpy() if constants[arg.name].dtype == torch.float32 else None
        else:
            value = None
        reason = constant_reason(kind, value) if value is not None else None
        if reason:
            return reason
    return None


def _rules(node: torch.fx.Node, kind: str, dtype: str, constants: Mapping[str, torch.Tensor]) -> str | None:
    if kind in NORMALIZATION_OPS:
        return normalization_reason(kind)
    if dtype != "float16":  # BF16 has FP32's range: the range rules only matter for FP16
        return None
    return _rule_range_fragile(node, kind) or _rule_constant(node, kind, constants)


def _norm_path(node: torch.fx.Node) -> list[torch.fx.Node]:
    """Nodes from a reduction to a Sqrt/Reciprocal within ``NORM_HOPS``; empty when none is reached."""
    frontier = [(node, [node])]
    for _ in range(NORM_HOPS):
        following = []
        for current, path in frontier:
            for user in readers(current):
                if user.op == "call_function" and op_kind(user) in NORM_FINISHERS:
                    return [*path, user]
                following.append((user, [*path, user]))
        frontier = following
    return []


def _parts(node: torch.fx.Node, dtype: str, ranges: Mapping[str, float]) -> dict[str, str]:
    """The kept parts of an attention: its boolean mask's bias (FP16 cannot hold ``MASK_FILL``), its softmax."""
    if target_name(node) != "aten.scaled_dot_product_attention.default":
        return {}
    kept = {}
    mask = _val(node.args[3]) if len(node.args) > 3 else _val(node.kwargs.get("attn_mask"))
    if isinstance(mask, torch.Tensor) and mask.dtype == torch.bool:  # the probe's reason first, as the float pass's
        kept[f"{node.name}:mask"] = range_reason("Where", dtype, ranges.get(f"{node.name}:mask", 0.0)) or (
            constant_reason("Where", np.array([0.0, MASK_FILL], np.float32)) if dtype == "float16" else None)
    scores = ranges.get(f"{node.name}:scores", 0.0)
    softmax = range_reason("Softmax", dtype, scores) or softmax_reason("Softmax", dtype, scores)
    if softmax:
        kept[f"{node.name}:softmax"] = softmax
    return {name: reason for name, reason in kept.items() if reason}


def _probe_reason(node: torch.fx.Node, kind: str, dtype: str, ranges: Mapping[str, float]) -> str | None:
    outputs = [u for u in node.users if u.target is operator.getitem]  # a multi-output op's values
    seen = [ranges[n.name] for n in [node, *outputs, *node.all_input_nodes] if n.name in ranges]
    reason = range_reason(kind, dtype, max(seen, default=0.0))
    if reason is None and node.args and isinstance(node.args[0], torch.fx.Node):
        reason = softmax_reason(kind, dtype, ranges.get(node.args[0].name, 0.0))
    return reason


def plan_fp32(graph: torch.fx.Graph, constants: Mapping[str, torch.Tensor], dtype: str,
              example_inputs: tuple | None = None) -> Fp32Plan:
    """The FP32 rule set on ``graph``'s calls (constants marked by ``lower.mark_constants``): the range probe's
    reasons first (on ``example_inputs``, when given), then the rules, then the hand-written normalisations."""
    ranges, folded = measure_ranges(graph, constants, example_inputs) if example_inputs is not None else ({}, {})
    known = {**constants, **folded}
    calls = [n for n in graph.nodes if n.op == "call_function" and n.target is not operator.getitem
             and not n.meta.get("trtforge_const") and _computes_float(n)]
    kept: dict[str, str] = {}
    for node in calls:
        kind = op_kind(node)
        reason = _probe_reason(node, kind, dtype, ranges) or _rules(node, kind, dtype, known)
        if reason:
            kept[node.name] = reason
        kept.update(_parts(node, dtype, ranges))
    for node in calls:
        kind = op_kind(node)
        if kind in NORM_REDUCTIONS and node.name not in kept:
            path = _norm_path(node)
            for member in path:
                kept.setdefault(member.name, norm_path_reason(op_kind(member), kind, op_kind(path[-1])))
    order = {node.name: index for index, node in enumerate(graph.nodes)}
    return Fp32Plan(dtype, dict(sorted(kept.items(), key=lambda item: order[item[0].split(":")[0]])))


def _magnitude(value) -> float | None:
    if not isinstance(value, torch.Tensor) or not value.dtype.is_floating_point or value.numel() == 0:
        return None
    finite = value.detach().abs()[torch.isfinite(value)]
    return float(finite.max()) if finite.numel() else None


class _Probe(torch.fx.Interpreter):
    """Runs the graph, recording each float value's largest finite |x| (and an attention's softmax input)."""

    def __init__(self, module: torch.nn.Module, graph: torch.fx.Graph) -> None:
        super().__init__(module, graph=graph)
        self.ranges: dict[str, float] = {}
        self.folded: dict[str, torch.Tensor] = {}

    def run_node(self, n: torch.fx.Node):
        out = super().run_node(n)
        seen = _magnitude(out)
        if seen is not None:
            self.ranges[n.name] = seen
        if n.meta.get("trtforge_const") and n.op == "call_function" and isinstance(out, torch.Tensor):
            self.folded[n.name] = out
        if n.op == "call_function" and target_name(n) == "aten.scaled_dot_product_attention.default":
            self._attention(n)
        return out


    def _attention(self, n: torch.fx.Node) -> None:
        """An attention's softmax input (``q kᵀ · scale + mask``) and its boolean mask's bias, as the converter
        and torch.onnx write them."""
        args = [self.env[a] if isinstance(a, torch.fx.Node) else a for a in n.args] + [None] * 7
        q, k, mask = args[0], args[1], n.kwargs.get("attn_mask", args[3])
        mask = self.env[mask] if isinstance(mask, torch.fx.Node) else mask
        scale = n.kwargs.get("scale", args[6]) or q.shape[-1] ** -0.5
        scores = q @ k.transpose(-2, -1) * scale
        if isinstance(mask, torch.Tensor) and mask.dtype == torch.bool:
            bias = torch.zeros(()).masked_fill(~mask, MASK_FILL) if (~mask).any() else torch.zeros(())
            self.ranges[f"{n.name}:mask"] = float(bias.abs().max())
            scores = scores + bias
        elif isinstance(mask, torch.Tensor):
            scores = scores + mask
        self.ranges[f"{n.name}:scores"] = _magnitude(scores) or 0.0


def measure_ranges(graph: torch.fx.Graph, constants: Mapping[str, torch.Tensor],
                   example_inputs: tuple) -> tuple[dict[str, float], dict[str, torch.Tensor]]:
    """Largest finite |x| of every float value of ``graph`` run on ``example_inputs`` (node name → magnitude), and
    the values of its folded constant nodes."""
    inputs = iter(example_inputs)
    args = [constants[n.name] if n.name in constants else next(inputs) for n in graph.find_nodes(op="placeholder")]
    probe = _Probe(graph.owning_module, graph)
    with torch.no_grad():
        probe.run(*args)
    return probe.ranges, probe.folded


__all__ = ["ATEN_KINDS", "Fp32Plan", "measure_ranges", "op_kind", "plan_fp32", "readers"]
