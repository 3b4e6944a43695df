"""Bias correction: remove the mean per-channel shift that INT8 introduces, through the bias.

For each quantized layer with a bias (Conv/ConvTranspose/Gemm bias input, or the constant of
the Add that follows a MatMul), run the Q/DQ simulation (ONNX Runtime) on the calibration set
next to a float twin of the layer fed the same inputs, take the mean of ``y_int8 − y_float``
per output channel, and subtract it from the bias. The graph keeps exactly its nodes; only
bias values change.

Example:
    >>> corrected, info = correct_biases(model, plan, calib_batches)
    >>> info[0]["mean_abs_shift"]
    0.0031
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import onnx_ir as ir

from trtforge.passes.graph import (
    consumers,
    copy_model,
    is_initializer,
    nodes_by_output,
    ort_session,
    values_by_name,
)
from trtforge.passes.qdq import QuantPlan, apply_plan
from trtforge.quantize.method import Candidate, Method, Skipped, State


def find_bias(layer: ir.Node) -> tuple[str, int] | None:
    """(bias initializer, channel axis of the layer output) of ``layer``."""
    if layer.op_type in ("Conv", "ConvTranspose", "Gemm"):
        bias = layer.inputs[2] if len(layer.inputs) > 2 else None
        if is_initializer(bias):
            ndim = len(bias.const_value.shape)
            if ndim == 1 or (layer.op_type == "Gemm" and ndim == 2 and bias.const_value.shape[0] == 1):
                return bias.name, (1 if layer.op_type != "Gemm" else -1)
        return None
    if layer.op_type == "MatMul":
        users = consumers(layer.outputs[0])
        if len(users) == 1 and users[0][0].op_type == "Add":
            add, idx = users[0]
            other = add.inputs[1 - idx]
            if is_initializer(other) and len(other.uses()) == 1 and len(other.const_value.shape) == 1:
                return other.name, -1
    return None


def _twin_input(value: ir.Value, original: ir.Value, out: ir.Model) -> ir.Value:
    """What a float twin reads instead of ``value``: the tensor before Q/DQ, or the float weight."""
    dq = value.producer()
    if dq is None or dq.op_type != "DequantizeLinear":
        return value
    q = dq.inputs[0].producer()
    if q is not None and q.op_type == "QuantizeLinear":
        return q.inputs[0]
    # An INT8 weight: the float original from the unquantized model.
    inits = out.graph.initializers
    if original.name in inits:
        return inits[original.name]
    if is_initializer(original):
        float_weight = ir.Value(name=original.name, const_value=original.const_value)
        out.graph.register_initializer(float_weight)
        return float_weight
    return values_by_name(out.graph)[original.name]


def with_float_twins(sim: ir.Model, model: ir.Model, outputs: Sequence[str]) -> tuple[ir.Model, dict[str, str]]:
    """``sim`` plus, for each layer output, a float copy of the layer fed the *same* (pre-Q) inputs.

    The difference between a layer and its twin is the shift that this layer's INT8 adds by
    itself; upstream errors reach both alike, so correcting every layer at once does not
    double-count them.
    """
    out = copy_model(sim)
    layers, originals = nodes_by_output(out.graph), nodes_by_output(model.graph)
    twins: dict[str, str] = {}
    for output in outputs:
        node, original = layers[output], originals[output]
        inputs = [None if v is None else _twin_input(v, original.inputs[i], out) for i, v in enumerate(node.inputs)]
        clone = ir.Node(node.domain, node.op_type, inputs, list(node.attributes.values()),
                        outputs=[ir.Value(name=output + "__float_twin")], name=node.name + "__float_twin")
        out.graph.append(clone)
        twins[output] = clone.outputs[0].name
    return out, twins


def measure_shifts(
    model: ir.Model, sim: ir.Model, outputs: Sequence[tuple[str, int]],
    batches: Sequence[dict[str, np.ndarray]], progress=None,
) -> dict[str, np.ndarray]:
    """Mean per-channel shift each INT8 layer adds by itself (layer − float twin, same inputs)."""
    twin_model, twins = with_float_twins(sim, model, [o for o, _ in outputs])
    names = [o for o, _ in outputs] + [twins[o] for o, _ in outputs]
    sess = ort_session(twin_model, extra_outputs=names)
    sums: dict[str, np.ndarray] = {}
    counts: dict[str, int] = {}
    task = progress.add_task("bias correction", total=len(batches)) if progress is not None else None
    for batch in batches:
        # One batch's activations at a time: they die when ``_add_shifts`` returns, before the next run.
        _add_shifts(dict(zip(names, sess.run(names, batch), strict=True)), outputs, twins, sums, counts)
        if task is not None:
            progress.advance(task)
    return {name: sums[name] / counts[name] for name in sums}


def _add_shifts(values: dict[str, np.ndarray], outputs: Sequence[tuple[str, int]], twins: dict[str, str],
                sums: dict[str, np.ndarray], counts: dict[str, int]) -> None:
    """Add one batch's per-channel sums of ``layer − float twin`` (and the counts) to ``sums``/``counts``."""
    for name, axis in outputs:
        diff = values[name].astype(np.float64) - values[twins[name]].astype(np.float64)
        diff = np.moveaxis(diff, axis, -1)
        diff = diff.reshape(-1, diff.shape[-1])
        sums[name] = sums.get(name, 0) + diff.sum(axis=0)
        counts[name] = counts.get(name, 0) + diff.shape[0]


def correct_biases(
    model: ir.Model, plan: QuantPlan, calib_batches: Sequence[dict[str, np.ndarray]], progress=None,
) -> tuple[ir.Model, list[dict]]:
    """A copy of ``model`` whose biases absorb the mean INT8 shift of each quantized layer."""
    layers = nodes_by_output(model.graph)
    targets = {layer.output: find_bias(layers[layer.output]) for layer in plan.layers}
    targets = {k: v for k, v in targets.items() if v is not None}
    if not targets:
        return model, []
    shifts = measure_shifts(model, apply_plan(model, plan), [(o, ax) for o, (_, ax) in targets.items()],
                            calib_batches, progress)
    out = copy_model(model)
    inits = out.graph.initializers
    labels = {layer.output: layer.label for layer in plan.layers}
    info = []
    for output, (bias_name, _) in targets.items():
        bias = inits[bias_name].const_value.numpy()
        shift = shifts[output].reshape(bias.shape).astype(bias.dtype)
        inits[bias_name].const_value = ir.tensor(bias - shift, name=bias_name)
        info.append({"layer": labels[output], "mean_abs_shift": float(np.abs(shift).mean())})
    return out, info


def _run(state: State) -> Candidate | Skipped:
    """Each quantized layer's mean shift subtracted from its bias: in the graph (ONNX path), or in a copy of the
    module (direct path, ``trtforge.quantize.module_sim.corrected_copy``)."""
    if not state.plan.layers:
        return Skipped()
    if state.path == "direct":
        from trtforge.quantize.module_sim import corrected_copy  # torch: the direct path has it loaded

        corrected, layers = corrected_copy(state.model, state.input_names, state.plan, state.data.calib_batches)
    else:
        corrected, info = correct_biases(state.model, state.plan, state.data.calib_batches, progress=state.progress)
        layers = len(info)
    return Candidate(replace(state, model=corrected, sim_out=None), {"layers": layers})


#: On the finished graph, both paths; kept only when it helps and keeps a budget that held.
METHOD = Method(name="bias_correction", stage="finished", keep="budget", run=_run,
                applies=lambda config, spec: bool(config.bias_correction))
