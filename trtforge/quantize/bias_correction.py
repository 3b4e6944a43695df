"""Bias correction: remove the mean per-channel shift that INT8 introduces, through the bias.

For each quantized layer with a bias (Conv/ConvTranspose/Gemm bias input, or the constant of
the Add that follows a MatMul), run the Q/DQ simulation (ONNX Runtime) on the calibration set
next to a float twin of the layer fed the same inputs, take the mean of ``y_int8 − y_float``
per output channel, and subtract it from the bias. The graph keeps exactly its nodes; only
bias values change.

Example:
    >>> corrected, info = correct_biases(proto, plan, calib_batches)
    >>> info[0]["mean_abs_shift"]
    0.0031
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import numpy_helper

from trtforge.quantize.graph_tools import GraphIndex, ort_session, with_outputs
from trtforge.quantize.plan import QuantPlan
from trtforge.quantize.qdq import apply_plan


def find_bias(index: GraphIndex, output: str) -> tuple[str, int] | None:
    """(bias initializer, channel axis of the layer output) of the layer producing ``output``."""
    node = index.producer[output]
    if node.op_type in ("Conv", "ConvTranspose", "Gemm"):
        if len(node.input) > 2 and node.input[2] in index.initializers:
            bias = numpy_helper.to_array(index.initializers[node.input[2]])
            if bias.ndim == 1 or (node.op_type == "Gemm" and bias.ndim == 2 and bias.shape[0] == 1):
                return node.input[2], (1 if node.op_type != "Gemm" else -1)
        return None
    if node.op_type == "MatMul":
        users = index.consumers.get(output, [])
        if len(users) == 1 and users[0][0].op_type == "Add":
            add = users[0][0]
            other = add.input[1 - users[0][1]]
            if other in index.initializers and len(index.consumers[other]) == 1:
                if numpy_helper.to_array(index.initializers[other]).ndim == 1:
                    return other, -1
    return None


def with_float_twins(sim: onnx.ModelProto, model: onnx.ModelProto, outputs: Sequence[str]) -> tuple[onnx.ModelProto, dict[str, str]]:
    """``sim`` plus, for each layer output, a float copy of the layer fed the *same* (pre-Q) inputs.

    The difference between a layer and its twin is the shift that this layer's INT8 adds by
    itself; upstream errors reach both alike, so correcting every layer at once does not
    double-count them.
    """
    out = onnx.ModelProto()
    out.CopyFrom(sim)
    index = GraphIndex(out)
    floats = {t.name: t for t in model.graph.initializer}
    have = {t.name for t in out.graph.initializer}
    twins: dict[str, str] = {}
    for output in outputs:
        node = index.producer[output]
        clone = onnx.NodeProto()
        clone.CopyFrom(node)
        clone.name = node.name + "__float_twin"
        del clone.output[:]
        clone.output.append(output + "__float_twin")
        for i, name in enumerate(node.input):
            dq = index.producer.get(name)
            if dq is None or dq.op_type != "DequantizeLinear":
                continue
            q = index.producer.get(dq.input[0])
            if q is not None and q.op_type == "QuantizeLinear":
                clone.input[i] = q.input[0]
            else:  # an INT8 weight: the float original from the unquantized model
                original = _original_input(model, output, i)
                clone.input[i] = original
                if original in floats and original not in have:
                    out.graph.initializer.append(floats[original])
                    have.add(original)
        out.graph.node.append(clone)
        twins[output] = clone.output[0]
    return out, twins


def _original_input(model: onnx.ModelProto, output: str, index: int) -> str:
    for node in model.graph.node:
        if node.output and node.output[0] == output:
            return node.input[index]
    raise KeyError(output)


def measure_shifts(
    model: onnx.ModelProto, sim: onnx.ModelProto, outputs: Sequence[tuple[str, int]],
    batches: Sequence[dict[str, np.ndarray]], progress=None,
) -> dict[str, np.ndarray]:
    """Mean per-channel shift each INT8 layer adds by itself (layer − float twin, same inputs)."""
    twin_model, twins = with_float_twins(sim, model, [o for o, _ in outputs])
    names = [o for o, _ in outputs] + [twins[o] for o, _ in outputs]
    sess = ort_session(with_outputs(twin_model, names))
    sums: dict[str, np.ndarray] = {}
    counts: dict[str, int] = {}
    task = progress.add_task("bias correction", total=len(batches)) if progress is not None else None
    for batch in batches:
        values = dict(zip(names, sess.run(names, batch), strict=True))
        for name, axis in outputs:
            diff = values[name].astype(np.float64) - values[twins[name]].astype(np.float64)
            diff = np.moveaxis(diff, axis, -1)
            diff = diff.reshape(-1, diff.shape[-1])
            sums[name] = sums.get(name, 0) + diff.sum(axis=0)
            counts[name] = counts.get(name, 0) + diff.shape[0]
        if task is not None:
            progress.advance(task)
    return {name: sums[name] / counts[name] for name in sums}


def correct_biases(
    model: onnx.ModelProto, plan: QuantPlan, calib_batches: Sequence[dict[str, np.ndarray]], progress=None,
) -> tuple[onnx.ModelProto, list[dict]]:
    """A copy of ``model`` whose biases absorb the mean INT8 shift of each quantized layer."""
    index = GraphIndex(model)
    targets = {layer.output: find_bias(index, layer.output) for layer in plan.layers}
    targets = {k: v for k, v in targets.items() if v is not None}
    if not targets:
        return model, []
    shifts = measure_shifts(model, apply_plan(model, plan), [(o, ax) for o, (_, ax) in targets.items()],
                            calib_batches, progress)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    inits = {t.name: t for t in out.graph.initializer}
    labels = {layer.output: layer.label for layer in plan.layers}
    info = []
    for output, (bias_name, _) in targets.items():
        bias = numpy_helper.to_array(inits[bias_name])
        shift = shifts[output].reshape(bias.shape).astype(bias.dtype)
        inits[bias_name].CopyFrom(numpy_helper.from_array(bias - shift, bias_name))
        info.append({"layer": labels[output], "mean_abs_shift": float(np.abs(shift).mean())})
    return out, info
