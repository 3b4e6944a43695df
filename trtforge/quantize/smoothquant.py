"""SmoothQuant for LayerNorm → Linear/MatMul: move activation outliers into the weights.

Per input channel j: ``s_j = max|X_j|^α / max|W_j|^(1−α)`` (α = 0.5 by default), with X the
LayerNorm output and W_j row j of every consumer's weight. ``1/s`` is folded into the
LayerNorm's scale and bias and ``s`` into the consumers' weight rows: no node is added and the
FP32 outputs stay the same. A LayerNorm whose output also feeds anything but Linear/MatMul
consumers (a residual Add in post-LN BERT, say) is left alone, since folding would change it.

Example:
    >>> smoothed, info = smooth(proto, calib_batches, alpha=0.5)
    >>> info["sites"][0]["layernorm"]
    'blocks.0.norm1'
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import numpy_helper

from trtforge.quantize.graph_tools import GraphIndex, attr, layer_label
from trtforge.quantize.observers import observe

S_MIN, S_MAX = 1e-4, 1e4


def _row_axis(node: onnx.NodeProto) -> int | None:
    """Axis of the weight that indexes the input channels (rows), or None when unsupported."""
    if node.op_type == "MatMul":
        return 0
    if node.op_type == "Gemm" and not attr(node, "transA", 0):
        return 1 if attr(node, "transB", 0) else 0
    return None


def find_sites(model: onnx.ModelProto) -> tuple[list[tuple[onnx.NodeProto, list[onnx.NodeProto]]], list[dict]]:
    """(LayerNorm, linear consumers) pairs that can be smoothed, and the skipped ones with reasons."""
    index = GraphIndex(model)
    sites, skipped = [], []
    for node in model.graph.node:
        if node.op_type != "LayerNormalization":
            continue
        label = layer_label(node, index)
        if len(node.input) < 3 or node.input[1] not in index.initializers or node.input[2] not in index.initializers:
            skipped.append({"layernorm": label, "reason": "scale or bias is not an initializer"})
            continue
        if any(o for o in node.output[1:]) or attr(node, "axis", -1) not in (-1, len(_shape(index, node)) - 1):
            skipped.append({"layernorm": label, "reason": "normalises more than the last axis or exposes statistics"})
            continue
        users = index.consumers.get(node.output[0], [])
        bad = []
        for user, idx in users:
            w = index.initializers.get(user.input[1]) if len(user.input) > 1 else None
            ok = (idx == 0 and _row_axis(user) is not None and w is not None and len(w.dims) == 2
                  and len(index.consumers[user.input[1]]) == 1)
            if not ok:
                bad.append(user.op_type)
        if bad or not users:
            skipped.append({"layernorm": label, "reason": f"output also feeds {', '.join(sorted(set(bad))) or 'nothing'}"
                            " (folding would change it)"})
            continue
        for name in node.input[1:3]:
            if len(index.consumers[name]) != 1:
                bad.append("shared")
        if bad:
            skipped.append({"layernorm": label, "reason": "scale or bias is shared with another node"})
            continue
        sites.append((node, [u for u, _ in users]))
    return sites, skipped


def _shape(index: GraphIndex, node: onnx.NodeProto) -> tuple[int, ...]:
    scale = index.initializers[node.input[1]]
    return tuple(scale.dims) or (1,)


def smoothing_factors(x_amax: np.ndarray, w_amax: np.ndarray, alpha: float) -> np.ndarray:
    """s_j = max|X_j|^α / max|W_j|^(1−α), 1 where either side is zero, clipped to [1e-4, 1e4]."""
    x = np.asarray(x_amax, dtype=np.float64)
    w = np.asarray(w_amax, dtype=np.float64)
    ok = (x > 0) & (w > 0)
    s = np.ones_like(x)
    s[ok] = x[ok] ** alpha / w[ok] ** (1.0 - alpha)
    return np.clip(s, S_MIN, S_MAX).astype(np.float32)


def smooth(
    model: onnx.ModelProto, calib_batches: Sequence[dict[str, np.ndarray]], alpha: float = 0.5, progress=None,
) -> tuple[onnx.ModelProto, dict]:
    """A smoothed copy of ``model`` and what was done (sites, skipped LayerNorms with reasons)."""
    sites, skipped = find_sites(model)
    info = {"alpha": alpha, "sites": [], "skipped": skipped}
    if not sites:
        return model, info
    stats = observe(model, [], calib_batches, per_channel=[ln.output[0] for ln, _ in sites], progress=progress,
                    total=len(calib_batches))
    out = onnx.ModelProto()
    out.CopyFrom(model)
    inits = {t.name: t for t in out.graph.initializer}
    index = GraphIndex(model)
    for ln, users in sites:
        x_amax = stats.channel_amax[ln.output[0]]
        weights = [(u, numpy_helper.to_array(inits[u.input[1]]).astype(np.float32)) for u in users]
        w_amax = np.max([np.abs(w).max(axis=1 - _row_axis(u)) for u, w in weights], axis=0)
        s = smoothing_factors(x_amax, w_amax, alpha)
        for name in ln.input[1:3]:
            arr = numpy_helper.to_array(inits[name]).astype(np.float32)
            inits[name].CopyFrom(numpy_helper.from_array((arr / s).astype(arr.dtype), name))
        for user, w in weights:
            shape = [1, 1]
            shape[_row_axis(user)] = -1
            inits[user.input[1]].CopyFrom(numpy_helper.from_array((w * s.reshape(shape)).astype(np.float32), user.input[1]))
        info["sites"].append({"layernorm": layer_label(ln, index), "consumers": len(users),
                              "s_min": float(s.min()), "s_max": float(s.max())})
    return out, info
