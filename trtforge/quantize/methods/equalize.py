"""Cross-layer equalization (Nagel et al., "Data-Free Quantization", 2019) of Conv → act → Conv chains.

For two convolutions joined by a positively homogeneous activation (ReLU, a Clip such as ReLU6, or
none), output channel i of the first and input channel i of the second can trade a factor ``s_i > 0``:
``W1[i] /= s_i``, ``b1[i] /= s_i``, ``W2[:, i] *= s_i`` (``W2[i]`` for a depthwise second conv), and a
Clip's bounds become ``bound / s_i`` per channel (written as Min/Max with per-channel constants, since
ONNX's Clip takes scalars). With ``s_i = sqrt(r1_i / r2_i)`` (``r``: the channel's largest absolute
weight) both channels end with the range ``sqrt(r1_i r2_i)``. A convolution that is the second of one
pair and the first of the next takes part in both, so the sweep repeats until the factors settle.

The FP32 function is unchanged up to rounding (the passes' rule: ONNX Runtime within 1e-5, tested on
EfficientNet-Lite0 and on a ReLU6 chain built to clip). A pair is skipped when a weight or bias is
shared, not an initializer, when the middle tensor has another consumer, or when the second conv is
grouped but not depthwise.

Example:
    >>> equalized, info = equalize(model)
    >>> info["pairs"], info["sweeps"]
    (32, 12)
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import onnx
import onnx_ir as ir

from trtforge.passes.evaluate import FP32_TOLERANCE
from trtforge.passes.graph import (
    attr,
    constant_value,
    consumers,
    copy_model,
    is_initializer,
    layer_label,
    load_ir,
)
from trtforge.quantize.method import Candidate, Method, Skipped, State

S_MIN, S_MAX = 1e-3, 1e3
ACTIVATIONS = ("Relu", "Clip")


@dataclass
class _Pair:
    """Two convolutions and what joins them; ``low``/``high``: the Clip's bounds per channel (None: none)."""

    first: ir.Node
    second: ir.Node
    act: ir.Node | None
    depthwise: bool
    low: np.ndarray | None = None
    high: np.ndarray | None = None
    scale: np.ndarray = field(default_factory=lambda: np.ones(0))


def _only_use(value: ir.Value) -> ir.Node | None:
    users = consumers(value)
    if len(users) != 1 or users[0][1] != 0 or value.is_graph_output():
        return None
    return users[0][0]


def _own_initializer(value: ir.Value | None) -> bool:
    return is_initializer(value) and value.const_value is not None and len(value.uses()) == 1


def _clip_bounds(act: ir.Node, channels: int) -> tuple[np.ndarray, np.ndarray] | None:
    """A Clip's (low, high) per channel, or None when a bound is not a constant (opset 11+ inputs)."""
    bounds = []
    for index, default in ((1, -np.inf), (2, np.inf)):
        value = act.inputs[index] if len(act.inputs) > index else None
        array = constant_value(value)
        if value is None:
            bounds.append(np.full(channels, default, np.float64))
        elif array is not None and array.size == 1:
            bounds.append(np.full(channels, float(array.reshape(())), np.float64))
        else:
            return None
    return bounds[0], bounds[1]


def _pair(first: ir.Node) -> _Pair | None:
    """The pair ``first`` starts, or None when it cannot be equalized."""
    weights = first.inputs[1] if len(first.inputs) > 1 else None
    bias = first.inputs[2] if len(first.inputs) > 2 else None
    if not _own_initializer(weights) or (bias is not None and not _own_initializer(bias)):
        return None
    channels = weights.const_value.shape[0]
    act, nxt = None, _only_use(first.outputs[0])
    if nxt is not None and nxt.op_type in ACTIVATIONS:
        act, nxt = nxt, _only_use(nxt.outputs[0])
    if nxt is None or nxt.op_type != "Conv" or not _own_initializer(nxt.inputs[1]):
        return None
    second_w = nxt.inputs[1].const_value
    groups = attr(nxt, "group", 1)
    depthwise = groups == channels and second_w.shape[0] == channels and second_w.shape[1] == 1
    if not depthwise and (groups != 1 or second_w.shape[1] != channels):
        return None
    pair = _Pair(first, nxt, act, depthwise, scale=np.ones(channels))
    if act is not None and act.op_type == "Clip":
        bounds = _clip_bounds(act, channels)
        if bounds is None:
            return None
        pair.low, pair.high = bounds
    return pair


def find_pairs(model: ir.Model) -> list[_Pair]:
    """Every Conv → (ReLU | Clip)? → Conv pair that can be equalized, in graph order."""
    return [pair for node in model.graph if node.op_type == "Conv" and (pair := _pair(node)) is not None]


def _ranges(pair: _Pair, weights: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Per middle channel: the first conv's output-channel range and the second conv's input-channel range."""
    w1, w2 = weights[pair.first.inputs[1].name], weights[pair.second.inputs[1].name]
    r1 = np.abs(w1.reshape(w1.shape[0], -1)).max(axis=1)
    cols = w2.reshape(w2.shape[0], -1) if pair.depthwise else np.swapaxes(w2, 0, 1).reshape(w2.shape[1], -1)
    return r1, np.abs(cols).max(axis=1)


def _apply(pair: _Pair, weights: dict[str, np.ndarray], s: np.ndarray) -> None:
    """Divide middle channel i by ``s[i]``: the first conv's row and bias and the Clip's bounds down, the second
    conv's input channel up."""
    w1, w2 = weights[pair.first.inputs[1].name], weights[pair.second.inputs[1].name]
    weights[pair.first.inputs[1].name] = w1 / s.reshape((-1,) + (1,) * (w1.ndim - 1))
    if len(pair.first.inputs) > 2 and pair.first.inputs[2] is not None:
        weights[pair.first.inputs[2].name] = weights[pair.first.inputs[2].name] / s
    axis_shape = (-1,) + (1,) * (w2.ndim - 1) if pair.depthwise else (1, -1) + (1,) * (w2.ndim - 2)
    weights[pair.second.inputs[1].name] = w2 * s.reshape(axis_shape)
    pair.scale = pair.scale * s
    if pair.low is not None:
        pair.low, pair.high = pair.low / s, pair.high / s


def _sweep(pairs: list[_Pair], weights: dict[str, np.ndarray]) -> float:
    """One pass over the pairs; returns the largest |log s| applied (0 when settled)."""
    worst = 0.0
    for pair in pairs:
        r1, r2 = _ranges(pair, weights)
        s = np.ones_like(r1)
        ok = (r1 > 0) & (r2 > 0)
        s[ok] = np.sqrt(r1[ok] / r2[ok])
        s = np.clip(s, S_MIN, S_MAX)
        _apply(pair, weights, s)
        worst = max(worst, float(np.abs(np.log(s)).max(initial=0.0)))
    return worst


def _bound_value(graph: ir.Graph, name: str, bounds: np.ndarray, rank: int, dtype: np.dtype) -> ir.Value:
    array = bounds.astype(dtype).reshape((-1,) + (1,) * (rank - 2))
    value = ir.Value(name=name, const_value=ir.tensor(array, name=name))
    graph.register_initializer(value)
    return value


def _rewrite_clip(graph: ir.Graph, pair: _Pair, rank: int) -> None:
    """The Clip becomes Max(Min(x, high/s), low/s) with per-channel constants (a bound that is ±inf is left out)."""
    act = pair.act
    dtype = pair.first.inputs[1].const_value.numpy().dtype
    x, out, label = act.inputs[0], act.outputs[0], act.name or layer_label(act)
    nodes = []
    if np.isfinite(pair.high).all():
        high = _bound_value(graph, f"{label}_cle_high", pair.high, rank, dtype)
        nodes.append(ir.node("Min", [x, high], outputs=[ir.Value(name=f"{label}_cle_min")], name=f"{label}_cle_min"))
        x = nodes[-1].outputs[0]
    if np.isfinite(pair.low).all():
        low = _bound_value(graph, f"{label}_cle_low", pair.low, rank, dtype)
        nodes.append(ir.node("Max", [x, low], outputs=[ir.Value(name=f"{label}_cle_max")], name=f"{label}_cle_max"))
    if not nodes:
        return
    graph.insert_after(act, nodes)
    out.replace_all_uses_with(nodes[-1].outputs[0])
    nodes[-1].outputs[0].name, out.name = out.name, f"{label}_cle_unused"  # the tensor keeps its name
    bounds = [act.inputs[i] for i in (1, 2) if len(act.inputs) > i and act.inputs[i] is not None]
    for index in (1, 2):
        if len(act.inputs) > index:
            act.replace_input_with(index, None)
    graph.remove(act, safe=True)
    for value in bounds:  # the Clip's own Constant bounds, now read by nothing
        producer = value.producer()
        if producer is not None and producer.op_type == "Constant" and not value.uses():
            graph.remove(producer, safe=True)


def _weights(model: ir.Model, pairs: list[_Pair]) -> dict[str, np.ndarray]:
    names = {v.name for p in pairs for n in (p.first, p.second) for v in n.inputs[1:3] if v is not None}
    return {name: model.graph.initializers[name].const_value.numpy().astype(np.float64) for name in names}


def _write(model: ir.Model, pairs: list[_Pair], weights: dict[str, np.ndarray]) -> None:
    inits = model.graph.initializers
    for name, array in weights.items():
        dtype = inits[name].const_value.numpy().dtype
        inits[name].const_value = ir.tensor(array.astype(dtype), name=name)
    for pair in pairs:
        if pair.low is not None:
            _rewrite_clip(model.graph, pair, len(pair.first.inputs[1].const_value.shape))


def _info(pairs: list[_Pair], **extra) -> dict:
    scales = np.concatenate([p.scale for p in pairs]) if pairs else np.ones(1)
    return {"pairs": len(pairs), **extra, "s_min": float(scales.min()), "s_max": float(scales.max()),
            "layers": [layer_label(p.first) for p in pairs]}


def equalize(model: ir.Model | onnx.ModelProto, max_sweeps: int = 50, tolerance: float = 1e-3) -> tuple[ir.Model, dict]:
    """Weight-range equalization: an equalized copy of ``model`` and what was done (pairs, sweeps, factors)."""
    out = copy_model(load_ir(model))
    pairs = find_pairs(out)
    weights = _weights(out, pairs)
    sweeps = 0
    while pairs and sweeps < max_sweeps:
        sweeps += 1
        if _sweep(pairs, weights) < tolerance:
            break
    _write(out, pairs, weights)
    return out, _info(pairs, sweeps=sweeps)


def _middle(pair: _Pair) -> str:
    return (pair.act or pair.first).outputs[0].name


def channel_amax(model: ir.Model, names: list[str], batches) -> dict[str, np.ndarray]:
    """|x|max per channel (axis 1) of each tensor in ``names`` over ``batches`` (ONNX Runtime, FP32)."""
    from trtforge.passes.graph import ort_session

    session = ort_session(model, extra_outputs=names)
    found: dict[str, np.ndarray] = {}
    for batch in batches:
        for name, value in zip(names, session.run(names, batch), strict=True):
            amax = np.abs(np.moveaxis(value, 1, 0).reshape(value.shape[1], -1)).max(axis=1).astype(np.float64)
            found[name] = amax if name not in found else np.maximum(found[name], amax)
    return found


def equalize_activations(model: ir.Model | onnx.ModelProto, batches) -> tuple[ir.Model, dict]:
    """Activation-range equalization for per-channel weights: for each Conv → act → depthwise Conv pair, the
    middle tensor's channels are scaled to the largest channel's observed range (``s_i = a_i / max a``), so
    its one per-tensor INT8 scale serves every channel; both convs absorb the factor in their own
    per-output-channel weight scales (the first in its rows, the depthwise one in its channels), so no
    weight loses precision."""
    out = copy_model(load_ir(model))
    pairs = [p for p in find_pairs(out) if p.depthwise]
    amax = channel_amax(out, [_middle(p) for p in pairs], batches) if pairs else {}
    weights = _weights(out, pairs)
    for pair in pairs:
        a = amax[_middle(pair)]
        s = np.where(a > 0, a / max(a.max(), 1e-30), 1.0)
        _apply(pair, weights, np.clip(s, S_MIN, 1.0))
    _write(out, pairs, weights)
    return out, _info(pairs, mode="activations")


def channel_range(model: ir.Model, names: list[str], batches) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """(min, max) per channel (axis 1) of each tensor in ``names`` over ``batches`` (ONNX Runtime, FP32)."""
    from trtforge.passes.graph import ort_session

    session = ort_session(model, extra_outputs=names)
    found: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for batch in batches:
        for name, value in zip(names, session.run(names, batch), strict=True):
            flat = np.moveaxis(value, 1, 0).reshape(value.shape[1], -1).astype(np.float64)
            low, high = flat.min(axis=1), flat.max(axis=1)
            if name in found:
                low, high = np.minimum(found[name][0], low), np.maximum(found[name][1], high)
            found[name] = (low, high)
    return found


def _absorbable(pair: _Pair) -> bool:
    """A ReLU or a Clip with a finite lower bound between the convs, a bias on the first, and no padding on the
    second (a shifted input would meet the unshifted zeros of the padding: not the same function)."""
    second = pair.second
    rank = len(second.inputs[1].const_value.shape) - 2
    unpadded = attr(second, "auto_pad", "NOTSET") in ("NOTSET", "VALID") and not any(attr(second, "pads", [0] * rank))
    bias = pair.first.inputs[2] if len(pair.first.inputs) > 2 else None
    clip_ok = pair.act is not None and (pair.act.op_type == "Relu" or np.isfinite(pair.low).all())
    second_bias = second.inputs[2] if len(second.inputs) > 2 else None
    return unpadded and clip_ok and bias is not None and (second_bias is None or _own_initializer(second_bias))


def _shift(pair: _Pair, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """The largest per-channel shift ``c ≥ 0`` with ``act(h − c) = act(h) − c`` for every observed ``h``: the
    channel stays above the activation's lower bound after the shift and never reaches its upper bound."""
    floor = np.zeros_like(low) if pair.act.op_type == "Relu" else pair.low
    ceiling = np.full_like(high, np.inf) if pair.act.op_type == "Relu" else pair.high
    return np.where(high <= ceiling, np.maximum(low - floor, 0.0), 0.0)


def _second_bias(graph: ir.Graph, pair: _Pair, dtype) -> ir.Value:
    """The second conv's bias initializer (made, zeros, when it has none)."""
    second = pair.second
    if len(second.inputs) > 2 and second.inputs[2] is not None:
        return second.inputs[2]
    name = f"{pair.second.name or layer_label(second)}_absorbed_bias"
    channels = second.inputs[1].const_value.shape[0]
    value = ir.Value(name=name, const_value=ir.tensor(np.zeros(channels, dtype), name=name))
    graph.register_initializer(value)
    if len(second.inputs) < 3:
        second.resize_inputs(3)
    second.replace_input_with(2, value)
    return value


def _absorb(graph: ir.Graph, pair: _Pair, c: np.ndarray) -> None:
    """``b1 −= c`` and ``b2 += W2·c`` (summed over the kernel; per channel for a depthwise second conv)."""
    b1 = pair.first.inputs[2]
    dtype = b1.const_value.numpy().dtype
    b1.const_value = ir.tensor((b1.const_value.numpy().astype(np.float64) - c).astype(dtype), name=b1.name)
    w2 = pair.second.inputs[1].const_value.numpy().astype(np.float64)
    summed = w2.reshape(w2.shape[0], w2.shape[1], -1).sum(axis=2)
    extra = summed[:, 0] * c if pair.depthwise else summed @ c
    b2 = _second_bias(graph, pair, dtype)
    b2.const_value = ir.tensor((b2.const_value.numpy().astype(np.float64) + extra).astype(dtype), name=b2.name)


def absorb_biases(model: ir.Model | onnx.ModelProto, batches) -> tuple[ir.Model, dict]:
    """High-bias absorption (Nagel et al. 2019, section 4.2): for each Conv → ReLU/ReLU6 → unpadded Conv pair,
    a channel whose pre-activation stays at least ``c`` above the activation's lower bound (and below its clip)
    on ``batches`` gives ``c`` from the first conv's bias to the second's, shrinking the middle tensor's range.
    The function is unchanged wherever the pre-activation stays in that range (on ``batches``: by
    construction). Returns the copy and what was done."""
    out = copy_model(load_ir(model))
    pairs = [p for p in find_pairs(out) if _absorbable(p)]
    ranges = channel_range(out, [p.first.outputs[0].name for p in pairs], batches) if pairs else {}
    layers, channels = [], 0
    for pair in pairs:
        c = _shift(pair, *ranges[pair.first.outputs[0].name])
        if (c > 0).any():
            _absorb(out.graph, pair, c)
            layers.append(layer_label(pair.first))
            channels += int((c > 0).sum())
    return out, {"pairs": len(pairs), "absorbed_layers": layers, "channels": channels}


def equalize_for_quantization(model: ir.Model | onnx.ModelProto, batches, check_batches) -> tuple[ir.Model, dict]:
    """``quantize_model(equalize=True)``'s graph: high biases absorbed (measured on ``batches``), then weight ranges
    equalized, with a record of what was done. Absorbing first gives the graph equalizing first would (each shift
    scales with its channel's factor), and ``equalize`` writes each ReLU6 as per-channel Min/Max, which
    ``absorb_biases`` does not read. Absorption holds only where the pre-activations stay in the range measured:
    when the result moves any output of ``check_batches`` (samples it did not see) by more than
    ``FP32_TOLERANCE`` (relative L2), the absorption is dropped and the graph is only equalized (exact).
    ``fp32_rel_l2_max``: the returned graph's largest change there (``absorbed_fp32_rel_l2_max``: the dropped
    absorption's).

    Example:
        >>> graph, info = equalize_for_quantization(model, calib_batches, held_batches)
        >>> info["pairs"], info["absorption"], info["absorbed_channels"]
        (34, 'dropped', 412)
    """
    from trtforge.core.metrics import per_sample_errors
    from trtforge.quantize.report import run_model

    base = load_ir(model)
    reference = run_model(base, check_batches)

    def moved(graph: ir.Model) -> float:
        return float(per_sample_errors(reference, run_model(graph, check_batches))[0].max())

    absorbed, absorption = absorb_biases(base, batches)
    out, info = equalize(absorbed) if absorption["channels"] else equalize(base)
    record = {"absorption": "none" if not absorption["channels"] else "applied",
              "absorbed_layers": absorption["absorbed_layers"], "absorbed_channels": absorption["channels"],
              "fp32_rel_l2_max": moved(out)}
    if record["fp32_rel_l2_max"] > FP32_TOLERANCE and absorption["channels"]:
        out, info = equalize(base)
        record.update(absorption="dropped", absorbed_fp32_rel_l2_max=record["fp32_rel_l2_max"],
                      fp32_rel_l2_max=moved(out))
    return out, {**info, **record}


def _run(state: State) -> Candidate | Skipped:
    """The equalized graph, calibrated again, at the plan placement starts from; nothing when there is no pair
    (absorption needs a pair too: no second calibration)."""
    equalized, info = equalize_for_quantization(state.model, state.data.calib_batches, state.data.held_batches)
    if not info["pairs"]:
        return Skipped({"applied": False, **info})
    analysis, full, cache = state.tools.calibrate(equalized)
    plan = state.tools.start_plan(analysis, full)
    return Candidate(replace(state, model=equalized, analysis=analysis, full=full, plan=plan, cache=cache,
                             sim_out=None), info)


#: Before placement: ``placement="auto"`` searches on the graph kept.
METHOD = Method(name="equalization", stage="calibrated", keep="budget", run=_run,
                applies=lambda config, spec: config.equalize)
