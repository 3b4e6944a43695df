"""SmoothQuant for LayerNorm → Linear/MatMul: move activation outliers into the weights.

Per input channel j: ``s_j = max|X_j|^α / max|W_j|^(1−α)`` (α = 0.5 by default), with X the
LayerNorm output and W_j row j of every consumer's weight. ``1/s`` is folded into the
LayerNorm's scale and bias and ``s`` into the consumers' weight rows: no node is added and the
FP32 outputs stay the same. A LayerNorm whose output also feeds anything but Linear/MatMul
consumers (a residual Add in post-LN BERT, say) is left alone, since folding would change it.

Example:
    >>> smoothed, info = smooth(model, calib_batches, alpha=0.5)
    >>> info["sites"][0]["layernorm"]
    'blocks.0.norm1'
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import onnx
import onnx_ir as ir

from trtforge.core.sidecar_records import SmoothQuantRecord
from trtforge.passes.graph import attr, consumers, copy_model, is_initializer, layer_label, load_ir
from trtforge.quantize.method import Candidate, Method, State
from trtforge.quantize.observers import observe

S_MIN, S_MAX = 1e-4, 1e4


def _row_axis(node: ir.Node) -> int | None:
    """Axis of the weight that indexes the input channels (rows), or None when unsupported."""
    if node.op_type == "MatMul":
        return 0
    if node.op_type == "Gemm" and not attr(node, "transA", 0):
        return 1 if attr(node, "transB", 0) else 0
    return None


def _linear_user(user: ir.Node, idx: int) -> bool:
    """Whether ``user`` reads the LayerNorm output as its data input with a 2-D weight of its own."""
    w = user.inputs[1] if len(user.inputs) > 1 else None
    return (idx == 0 and _row_axis(user) is not None and is_initializer(w) and w.const_value is not None
            and len(w.const_value.shape) == 2 and len(w.uses()) == 1)


def _skip_reason(node: ir.Node) -> str | None:
    """Why the LayerNorm ``node`` cannot be smoothed, or None."""
    params = node.inputs[1:3]
    if len(node.inputs) < 3 or not all(is_initializer(v) for v in params):
        return "scale or bias is not an initializer"
    rank = len(params[0].const_value.shape) or 1
    if any(o.name for o in node.outputs[1:]) or attr(node, "axis", -1) not in (-1, rank - 1):
        return "normalises more than the last axis or exposes statistics"
    users = consumers(node.outputs[0])
    bad = [user.op_type for user, idx in users if not _linear_user(user, idx)]
    if bad or not users:
        return f"output also feeds {', '.join(sorted(set(bad))) or 'nothing'} (folding would change it)"
    if any(len(v.uses()) != 1 for v in params):
        return "scale or bias is shared with another node"
    return None


def find_sites(model: ir.Model | onnx.ModelProto) -> tuple[list[tuple[ir.Node, list[ir.Node]]], list[dict]]:
    """(LayerNorm, linear consumers) pairs that can be smoothed, and the skipped ones with reasons."""
    model = load_ir(model)
    sites, skipped = [], []
    for node in model.graph:
        if node.op_type != "LayerNormalization":
            continue
        reason = _skip_reason(node)
        if reason:
            skipped.append({"layernorm": layer_label(node), "reason": reason})
        else:
            sites.append((node, [u for u, _ in consumers(node.outputs[0])]))
    return sites, skipped


def smoothing_factors(x_amax: np.ndarray, w_amax: np.ndarray, alpha: float) -> np.ndarray:
    """s_j = max|X_j|^α / max|W_j|^(1−α), 1 where either side is zero, clipped to [1e-4, 1e4]."""
    x = np.asarray(x_amax, dtype=np.float64)
    w = np.asarray(w_amax, dtype=np.float64)
    ok = (x > 0) & (w > 0)
    s = np.ones_like(x)
    s[ok] = x[ok] ** alpha / w[ok] ** (1.0 - alpha)
    return np.clip(s, S_MIN, S_MAX).astype(np.float32)


def _rescale(value: ir.Value, array: np.ndarray) -> None:
    value.const_value = ir.tensor(array, name=value.name)


def smooth(
    model: ir.Model | onnx.ModelProto, calib_batches: Sequence[dict[str, np.ndarray]], alpha: float = 0.5,
    progress=None,
) -> tuple[ir.Model, dict]:
    """A smoothed copy of ``model`` and what was done (sites, skipped LayerNorms with reasons)."""
    model = load_ir(model)
    sites, skipped = find_sites(model)
    info = {"alpha": alpha, "sites": [], "skipped": skipped}
    if not sites:
        return model, info
    stats = observe(model, [], calib_batches, per_channel=[ln.outputs[0].name for ln, _ in sites],
                    progress=progress, total=len(calib_batches))
    out = copy_model(model)
    inits = out.graph.initializers
    for ln, users in sites:
        x_amax = stats.channel_amax[ln.outputs[0].name]
        weights = [(u, u.inputs[1].const_value.numpy().astype(np.float32)) for u in users]
        w_amax = np.max([np.abs(w).max(axis=1 - _row_axis(u)) for u, w in weights], axis=0)
        s = smoothing_factors(x_amax, w_amax, alpha)
        for value in ln.inputs[1:3]:
            arr = value.const_value.numpy().astype(np.float32)
            _rescale(inits[value.name], (arr / s).astype(arr.dtype))
        for user, w in weights:
            shape = [1, 1]
            shape[_row_axis(user)] = -1
            _rescale(inits[user.inputs[1].name], (w * s.reshape(shape)).astype(np.float32))
        info["sites"].append({"layernorm": layer_label(ln), "consumers": len(users),
                              "s_min": float(s.min()), "s_max": float(s.max())})
    return out, info


def _run(state: State) -> Candidate:
    model, info = smooth(state.model, state.data.calib_batches, state.config.smoothquant, progress=state.progress)
    return Candidate(replace(state, model=model), info)


#: W8A8 only (``check_quant_options``); the flow calibrates the smoothed graph, nothing to measure before.
METHOD = Method(name="smoothquant", stage="graph", keep="always", row=False, run=_run, record=SmoothQuantRecord,
                applies=lambda config, spec: config.smoothquant is not None)
