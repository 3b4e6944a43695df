"""AWQ-lite for weight-only GEMMs: scale weight rows by the activations' mean magnitude before quantizing.

Per layer, with x̄_j the mean |x_j| of input channel j on the calibration samples, AWQ searches
α ∈ {0, 0.1, …, 1} for ``s = x̄^α`` (normalised to geometric mean 1) that minimises
‖X·(Q(W·s)/s − W)‖² on sampled activation rows X. The chosen ``s`` goes into the weight rows and
``1/s`` into a Mul in front of the layer, so the FP32 graph computes the same values (up to
rounding); the weight-only grid then spends its levels where the activations are large. α = 0 leaves
a layer as it was.

Like every option it is judged by the task: ``awq_if_better`` keeps the scaled graph only when the
held-back relative L2 of the Q/DQ simulation improves, and records both numbers.

Example:
    >>> scaled, plan, info = awq_scale(model, plan, spec, calib_batches)
    >>> info[0]["alpha"]
    0.5
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import onnx_ir as ir

from trtforge.passes.graph import copy_model, nodes_by_output, ort_session
from trtforge.passes.qdq import QuantInput, QuantLayer, QuantPlan, dequantized_weight
from trtforge.quantize.gemm_weights import weight_gemms
from trtforge.quantize.method import Candidate, Method, State
from trtforge.quantize.precision import PrecisionSpec

ALPHAS = tuple(round(0.1 * i, 1) for i in range(11))
#: Activation rows kept per layer for the search (enough for a stable error, small in memory).
SAMPLE_ROWS = 256


def _stats(model: ir.Model, tensors: Sequence[str], batches) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per tensor: mean |x| per last-axis channel, and up to ``SAMPLE_ROWS`` rows of x."""
    sess = ort_session(model, extra_outputs=list(tensors))
    sums: dict[str, np.ndarray] = {}
    counts: dict[str, int] = {}
    rows: dict[str, list[np.ndarray]] = {t: [] for t in tensors}
    for batch in batches:
        for name, value in zip(tensors, sess.run(list(tensors), batch), strict=True):
            x = np.asarray(value, dtype=np.float32).reshape(-1, value.shape[-1])
            sums[name] = sums.get(name, 0) + np.abs(x).sum(axis=0)
            counts[name] = counts.get(name, 0) + x.shape[0]
            kept = sum(r.shape[0] for r in rows[name])
            if kept < SAMPLE_ROWS:
                rows[name].append(x[: SAMPLE_ROWS - kept])
    return {t: (sums[t] / counts[t], np.concatenate(rows[t])) for t in tensors}


def _search(x_mean: np.ndarray, x_rows: np.ndarray, weight: np.ndarray, reduction: int, w: QuantInput,
            spec: PrecisionSpec) -> tuple[float, np.ndarray, float, float]:
    """(best α, its s, its error, the error at α = 0) for one 2-D weight (``reduction``: its K axis)."""
    w_kn = weight if reduction == 0 else weight.T
    ref = x_rows @ w_kn
    shape = (-1, 1) if reduction == 0 else (1, -1)
    trials = []
    for alpha in ALPHAS:
        s = np.maximum(x_mean, 1e-8) ** alpha
        s = np.clip(s / np.sqrt(s.max() * s.min()), 1e-4, 1e4).astype(np.float32)
        scaled = weight * s.reshape(shape)
        q = spec.weight_input((w.index, w.tensor, 1 - reduction), scaled)
        if isinstance(q, str):
            break
        deq = dequantized_weight(scaled, q) / s.reshape(shape)
        trials.append((float(np.mean((x_rows @ (deq if reduction == 0 else deq.T) - ref) ** 2)), alpha, s))
    if not trials:
        return 0.0, np.ones_like(x_mean), 0.0, 0.0
    err, alpha, s = min(trials, key=lambda t: t[0])
    return alpha, s, err, trials[0][0]


def _reduction(w: QuantInput) -> int:
    """The reduction (K) axis of a 2-D weight: the blocked axis, or the one that is not the channel axis."""
    return w.axis if w.block_size else 1 - w.axis


def awq_scale(model: ir.Model, plan: QuantPlan, spec: PrecisionSpec, calib_batches,
              ) -> tuple[ir.Model, QuantPlan, list[dict]]:
    """A copy of ``model`` with AWQ scales folded in (a Mul before each scaled layer) and the plan for it."""
    todo = [(layer, activation, _reduction(w)) for layer, w, activation in weight_gemms(model, plan)]
    stats = _stats(model, sorted({t for _, t, _ in todo}), calib_batches)
    out = copy_model(model)
    inits, out_nodes = out.graph.initializers, nodes_by_output(out.graph)
    layers = {layer.output: layer for layer in plan.layers}
    info = []
    for layer, tensor, reduction in todo:
        node = out_nodes[layer.output]
        w = next(q for q in layer.inputs if q.is_weight)
        weight = inits[w.tensor].const_value.numpy().astype(np.float32)
        alpha, s, err, zero_err = _search(*stats[tensor], weight, reduction, w, spec)
        if alpha == 0.0:
            continue
        shape = (-1, 1) if reduction == 0 else (1, -1)
        inits[w.tensor].const_value = ir.tensor(weight * s.reshape(shape), name=w.tensor)
        inv = ir.Value(name=f"{layer.output}__awq_inv_scale", const_value=ir.tensor((1.0 / s).astype(np.float32)))
        out.graph.register_initializer(inv)
        mul = ir.node("Mul", [node.inputs[0], inv], outputs=[ir.Value(name=f"{layer.output}__awq_in")],
                      name=f"{node.name}__awq_Mul")
        out.graph.insert_before(node, [mul])
        node.replace_input_with(0, mul.outputs[0])
        q = spec.weight_input((w.index, w.tensor, 1 - reduction), weight * s.reshape(shape))
        layers[layer.output] = QuantLayer(layer.output, layer.op_type, layer.label,
                                          tuple(q if x.is_weight else x for x in layer.inputs), layer.macs)
        info.append({"layer": layer.label, "alpha": alpha, "error_ratio": err / zero_err if zero_err else 1.0})
    new_plan = QuantPlan(tuple(layers[la.output] for la in plan.layers), plan.excluded, plan.calibrator,
                         plan.total_macs, plan.precision)
    return out, new_plan, info


def _run(state: State) -> Candidate:
    progress = state.progress
    task = progress.add_task("AWQ-lite", total=None) if progress is not None else None
    scaled, plan, info = awq_scale(state.model, state.plan, state.spec, state.data.calib_batches)
    if task is not None:
        progress.update(task, total=1, completed=1)
    return Candidate(replace(state, model=scaled, plan=plan, sim_out=None),
                     {"layers": len(info), "alpha_mean": float(np.mean([i["alpha"] for i in info])) if info else 0.0},
                     changed=bool(info))


#: Weight-only precisions (``check_quant_options``); no time row (as before the driver).
METHOD = Method(name="awq", stage="placed", keep="better", row=False, run=_run,
                applies=lambda config, spec: config.awq)
