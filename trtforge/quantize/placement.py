"""Placement: which Conv/ConvTranspose/MatMul/Gemm layers run quantized, and why the others do not.

The default INT8 rules are RF-DETR's measured ones, kept as data (``RULES``):
* a convolution whose input channels are not a multiple of 32 stays FP16;
* the final head (a layer with no Conv/MatMul/Gemm after it) stays FP16.
FP8 has its own (``FP8_RULES``, Model Optimizer's): a convolution with fewer than 16 input channels per
group or output channels stays FP16, and a GEMV-shaped MatMul (one output column) too. Weight-only
precisions quantize GEMM weights only (``weight_only_analysis``) and have no rules.
Then two structural constraints:
* an attention block (Q/K/V projections, QKᵀ, ·V, output projection) is all INT8 or all FP16;
* an MLP's first projection is quantized only when its second one is.
``include=[regex]`` forces layers into INT8 and ``exclude=[regex]`` forces them to FP16; a
pattern matches an op type exactly (``"ConvTranspose"``), a layer kind (``"DepthwiseConv"``,
see ``LAYER_KINDS``), or searches the layer's label, node name or output name. ``exclude`` wins
over ``include``.

Example:
    >>> analysis = analyse(model)          # an onnx_ir model (or a ModelProto, parsed)
    >>> decisions = decide(analysis, exclude=[r"_fc"])
    >>> decisions["logits"]
    'excluded by pattern \'_fc\''
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import onnx
import onnx_ir as ir

from trtforge.core.config import validate_patterns
from trtforge.core.postprocess import NMS_PREFIX
from trtforge.passes.graph import attr, constant_value, consumers, is_constant, layer_label, load_ir
from trtforge.passes.ops import MAC_OPS, NONLINEAR_OPS, SHAPE_OPS

#: Ops an attention path may pass through between the MatMuls and the Softmax.
ATTENTION_PATH_OPS = SHAPE_OPS | {"Add", "Mul", "Div", "Sub", "Where", "Dropout", "Slice", "Expand"}
BIAS_OPS = frozenset({"Add", "Mul", "Div", "Sub"})


@dataclass(frozen=True)
class Candidate:
    """A layer the quantizer could run in INT8."""

    node: str
    output: str
    op_type: str
    label: str
    activations: tuple[tuple[int, str], ...]  # (input index, tensor name)
    weight: tuple[int, str, int | None] | None  # (input index, constant name, channel axis)
    in_channels: int | None
    is_head: bool
    groups: int = 1  # Conv/ConvTranspose ``group``: > 1 is a grouped (depthwise) convolution
    out_channels: int | None = None  # Conv/ConvTranspose output channels; MatMul/Gemm output columns


@dataclass(frozen=True)
class Analysis:
    candidates: tuple[Candidate, ...]
    attention_blocks: tuple[tuple[str, ...], ...]  # outputs of each block's layers
    mlp_pairs: tuple[tuple[str, str], ...]  # (first projection output, second projection output)

    def by_output(self) -> dict[str, Candidate]:
        return {c.output: c for c in self.candidates}

    def groups(self) -> list[tuple[str, tuple[str, ...]]]:
        """(name, layer outputs) units for sensitivity: attention blocks, MLPs, single layers."""
        cands = self.by_output()
        seen: set[str] = set()
        out = []
        for i, block in enumerate(self.attention_blocks):
            out.append((f"attention[{i}] {cands[block[0]].label}", block))
            seen |= set(block)
        for first, second in self.mlp_pairs:
            if first in seen or second in seen:
                continue
            out.append((f"mlp {cands[first].label} → {cands[second].label}", (first, second)))
            seen |= {first, second}
        for c in self.candidates:
            if c.output not in seen:
                out.append((c.label, (c.output,)))
        return out


def _weight_axis(node: ir.Node, index: int, rank: int) -> int | None:
    if node.op_type == "Conv":
        return 0
    if node.op_type == "ConvTranspose":
        return 1 if attr(node, "group", 1) == 1 else None
    if node.op_type == "Gemm":
        if index == 1:
            return 0 if attr(node, "transB", 0) else 1
        return None
    if node.op_type == "MatMul" and index == 1 and rank == 2:
        return rank - 1
    # a batched constant B (rank 3+, e.g. DeBERTa's folded relative-position keys) is quantized per tensor: ONNX
    # Runtime fuses a per-channel DequantizeLinear on it into MatMulIntegerToFloat, which refuses a 1-D zero point
    return None


def _reaches_mac(start: ir.Value) -> bool:
    seen, stack = set(), [start]
    while stack:
        value = stack.pop()
        for user, _ in consumers(value):
            if user.op_type in MAC_OPS and not _postprocess(user):
                return True
            for out in user.outputs:
                if out.name and out.name not in seen:
                    seen.add(out.name)
                    stack.append(out)
    return False


def _postprocess(node: ir.Node) -> bool:
    """A node of the post-processing trtforge appended (``passes.nms``): FP32 at every precision, never a layer."""
    return bool(node.name) and node.name.startswith(NMS_PREFIX)


def _candidate(node: ir.Node) -> Candidate | None:
    if node.op_type not in MAC_OPS or _postprocess(node):
        return None
    activations, weight, weight_value = [], None, None
    for idx in (0, 1):  # data input and weight (bias and Gemm's C are not quantized)
        if idx >= len(node.inputs) or node.inputs[idx] is None or not node.inputs[idx].name:
            return None
        name = node.inputs[idx].name
        value = constant_value(node.inputs[idx])
        if value is None:
            activations.append((idx, name))
        elif value.dtype.kind == "f" and weight is None and (idx == 1 or node.op_type in ("MatMul", "Gemm")):
            weight, weight_value = (idx, name, _weight_axis(node, idx, value.ndim)), value
        else:
            return None
    if node.op_type in ("Conv", "ConvTranspose") and (weight is None or not activations):
        return None
    in_channels = out_channels = None
    if weight is not None and node.op_type == "Conv":
        in_channels = int(weight_value.shape[1]) * int(attr(node, "group", 1))
        out_channels = int(weight_value.shape[0])
    elif weight is not None and node.op_type == "ConvTranspose":
        in_channels = int(weight_value.shape[0])
        out_channels = int(weight_value.shape[1]) * int(attr(node, "group", 1))
    elif weight is not None and weight[2] is not None:
        out_channels = int(weight_value.shape[weight[2]])
    return Candidate(
        node=node.name, output=node.outputs[0].name, op_type=node.op_type, label=layer_label(node),
        activations=tuple(activations), weight=weight, in_channels=in_channels,
        is_head=not _reaches_mac(node.outputs[0]), groups=int(attr(node, "group", 1)), out_channels=out_channels,
    )


def _walk(start: ir.Value | None, through: frozenset[str], forward: bool, depth: int = 8,
          joins: bool = False) -> list[ir.Node]:
    """MAC nodes reached from ``start`` through ``through`` ops (non-constant data edges)."""
    found, seen = [], set()
    frontier = [start] if start is not None else []
    for _ in range(depth):
        nxt = []
        for value in frontier:
            if forward:
                nodes = [n for n, _ in consumers(value)]
            else:
                nodes = [value.producer()] if value.producer() is not None else []
            for node in nodes:
                if node.name in seen:
                    continue
                seen.add(node.name)
                if node.op_type in MAC_OPS:
                    found.append(node)
                    continue
                if node.op_type not in through:
                    continue
                if forward:
                    nxt.extend(o for o in node.outputs if o.name)
                else:
                    data = [i for i in node.inputs[: (1 if node.op_type in SHAPE_OPS else len(node.inputs))]
                            if i is not None and i.name and not is_constant(i)]
                    if node.op_type in BIAS_OPS and len(data) != 1 and not joins:
                        continue  # a residual or a mask join: not a single data path
                    nxt.extend(data)
        frontier = nxt
    return found


def _attention_blocks(model: ir.Model, cand: dict[str, Candidate]) -> list[tuple[str, ...]]:
    """Outputs of each attention block's layers: QKᵀ and ·V around a Softmax, with their projections."""
    blocks: list[tuple[str, ...]] = []
    order = list(cand)
    for node in model.graph:
        if node.op_type != "Softmax":
            continue
        qk = [n for n in _walk(node.inputs[0], ATTENTION_PATH_OPS, forward=False, joins=True)
              if n.name in cand and not cand[n.name].weight]
        av = [n for n in _walk(node.outputs[0], ATTENTION_PATH_OPS | {"IsNaN", "Not"}, forward=True)
              if n.name in cand and not cand[n.name].weight]
        if not qk or not av:
            continue
        members = {qk[0].name, av[0].name}
        for mm in (qk[0], av[0]):
            for value in mm.inputs:
                if value is None or not value.name or value is node.outputs[0]:
                    continue
                members |= {n.name for n in _walk(value, ATTENTION_PATH_OPS, forward=False)
                            if n.name in cand and cand[n.name].weight}
        members |= {n.name for n in _walk(av[0].outputs[0], SHAPE_OPS, forward=True)
                    if n.name in cand and cand[n.name].weight}
        members.discard(node.name)
        blocks.append(tuple(cand[m].output for m in sorted(members, key=order.index)))
    return blocks


def analyse(model: ir.Model | onnx.ModelProto) -> Analysis:
    """Find the candidates, the attention blocks and the MLP pairs of ``model``."""
    model = load_ir(model)
    candidates = [c for node in model.graph if (c := _candidate(node)) is not None]
    cand = {c.node: c for c in candidates}
    nodes = {node.name: node for node in model.graph}
    blocks = _attention_blocks(model, cand)
    in_block = {c.node for c in candidates if any(c.output in block for block in blocks)}
    pairs = []
    for c in candidates:
        if c.op_type not in ("MatMul", "Gemm") or not c.weight or c.node in in_block or not c.activations:
            continue
        before = _walk(nodes[c.node].inputs[c.activations[0][0]], NONLINEAR_OPS | BIAS_OPS | SHAPE_OPS,
                       forward=False)
        firsts = [n for n in before if n.name in cand and cand[n.name].weight and n.op_type in ("MatMul", "Gemm")]
        if len(firsts) == 1 and firsts[0].name not in in_block and _has_nonlinearity(firsts[0], c):
            pairs.append((cand[firsts[0].name].output, c.output))
    return Analysis(tuple(candidates), tuple(blocks), tuple(pairs))


def _has_nonlinearity(first: ir.Node, second: Candidate) -> bool:
    seen, stack = set(), [first.outputs[0]]
    while stack:
        value = stack.pop()
        for user, _ in consumers(value):
            if user.name == second.node or user.name in seen or user.op_type in MAC_OPS:
                continue
            seen.add(user.name)
            if user.op_type in NONLINEAR_OPS:
                return True
            stack.extend(o for o in user.outputs if o.name)
    return False


# -- rules (data) -------------------------------------------------------------------------------
def _channels_rule(c: Candidate) -> str | None:
    if c.op_type in ("Conv", "ConvTranspose") and c.in_channels is not None and c.in_channels % 32:
        return f"input channels {c.in_channels} not a multiple of 32 (INT8 kernels gain nothing)"
    return None


def _head_rule(c: Candidate) -> str | None:
    return "final head (no Conv/MatMul/Gemm after it)" if c.is_head else None


RULES: tuple[tuple[str, Callable[[Candidate], str | None]], ...] = (
    ("channels_multiple_of_32", _channels_rule),
    ("final_head_fp16", _head_rule),
)

#: Channels below which FP8 kernels gain nothing (Model Optimizer 0.47 skips such convolutions alike).
FP8_MIN_CHANNELS = 16


def _fp8_channels_rule(c: Candidate) -> str | None:
    if c.op_type not in ("Conv", "ConvTranspose") or c.in_channels is None:
        return None
    per_group = c.in_channels // max(c.groups, 1)
    if per_group < FP8_MIN_CHANNELS or (c.out_channels or 0) < FP8_MIN_CHANNELS:
        return (f"{per_group} input channels per group, {c.out_channels} output channels: fewer than "
                f"{FP8_MIN_CHANNELS} (FP8 kernels gain nothing)")
    return None


def _gemv_rule(c: Candidate) -> str | None:
    if c.op_type in ("MatMul", "Gemm") and c.out_channels == 1:
        return "GEMV-shaped (one output column; FP8 kernels gain nothing)"
    return None


FP8_RULES: tuple[tuple[str, Callable[[Candidate], str | None]], ...] = (
    ("fp8_min_channels_16", _fp8_channels_rule),
    ("fp8_no_gemv", _gemv_rule),
)
#: A precision's default placement rule set (``core.precisions.Precision.placement``) → its rules.
RULE_SETS: dict[str, tuple[tuple[str, Callable[[Candidate], str | None]], ...]] = {
    "w8a8": RULES, "fp8": FP8_RULES, "weight-only": (),
}


def weight_only_analysis(analysis: Analysis) -> Analysis:
    """The candidates weight-only quantization can take: MatMul/Gemm with a 2-D constant weight read as B
    (input 1) and an activation as A. No structural constraint applies (activations stay in the float type).
    """
    keep = tuple(c for c in analysis.candidates if c.op_type in ("MatMul", "Gemm") and c.weight is not None
                 and c.weight[0] == 1 and c.weight[2] is not None and c.activations == ((0, c.activations[0][1]),))
    return Analysis(keep, (), ())


#: Pattern words that name a kind of layer, not an ONNX op type.
LAYER_KINDS: dict[str, Callable[[Candidate], bool]] = {
    # Grouped/depthwise convolutions: on TensorRT-RTX their INT8 weights cost engine bytes (Lite0:
    # 16.8 MB against 10.7 MB with them in FP16; docs/quantization.md, "Engine size").
    "DepthwiseConv": lambda c: c.op_type == "Conv" and c.groups > 1,
}


def _matches(pattern: str, c: Candidate) -> bool:
    if pattern == c.op_type or (pattern in LAYER_KINDS and LAYER_KINDS[pattern](c)):
        return True
    rx = re.compile(pattern)
    return any(rx.search(s) for s in (c.label, c.node, c.output))


def decide(
    analysis: Analysis,
    exclude: Sequence[str] = (),
    include: Sequence[str] = (),
    rules: bool | Sequence[tuple[str, Callable[[Candidate], str | None]]] = True,
) -> dict[str, str | None]:
    """Layer output → None (quantized) or the reason it stays FP16.

    ``rules``: True for the INT8 ``RULES``, False for none, or a rule table (``FP8_RULES``).
    """
    validate_patterns(exclude, "exclude")
    validate_patterns(include, "include")
    table = RULES if rules is True else (rules or ())
    decisions: dict[str, str | None] = {}
    forced_in: set[str] = set()
    for c in analysis.candidates:
        reason = None
        if table:
            for _, rule in table:
                reason = rule(c)
                if reason:
                    break
        if any(_matches(p, c) for p in include):
            reason, _ = None, forced_in.add(c.output)
        hit = next((p for p in exclude if _matches(p, c)), None)
        if hit is not None:
            reason = f"excluded by pattern {hit!r}"
            forced_in.discard(c.output)
        decisions[c.output] = reason
    return constrain(analysis, decisions, forced_in)


def constrain(analysis: Analysis, decisions: dict[str, str | None], forced_in: set[str] = frozenset()) -> dict[str, str | None]:
    """Apply the structural constraints (attention all-or-nothing, MLP first-only-if-second)."""
    decisions = dict(decisions)
    labels = {c.output: c.label for c in analysis.candidates}
    for block in analysis.attention_blocks:
        fp16 = [o for o in block if decisions.get(o)]
        if fp16:
            for o in block:
                if not decisions.get(o) and o not in forced_in:
                    decisions[o] = f"attention block is all INT8 or all FP16 ({labels[fp16[0]]} stays FP16)"
    for first, second in analysis.mlp_pairs:
        if decisions.get(second) and not decisions.get(first) and first not in forced_in:
            decisions[first] = f"MLP first projection follows its second ({labels[second]} stays FP16)"
    return decisions
