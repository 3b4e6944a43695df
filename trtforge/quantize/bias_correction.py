"""Bias correction: remove the mean per-channel shift that INT8 introduces, through the bias.

For each quantized layer with a bias (Conv/ConvTranspose/Gemm bias input, or the constant of
the Add that follows a MatMul), run the FP32 graph and its Q/DQ simulation (ONNX Runtime) on
the calibration set, take the mean of ``y_int8 − y_fp32`` per output channel, and subtract it
from the bias. The graph keeps exactly its nodes; only bias values change.

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


def measure_shifts(
    model: onnx.ModelProto, sim: onnx.ModelProto, outputs: Sequence[tuple[str, int]],
    batches: Sequence[dict[str, np.ndarray]], progress=None,
) -> dict[str, np.ndarray]:
    """Mean per-channel ``sim − model`` of each (output, channel axis) over ``batches``."""
    names = [o for o, _ in outputs]
    ref = ort_session(with_outputs(model, names))
    test = ort_session(with_outputs(sim, names))
    sums: dict[str, np.ndarray] = {}
    counts: dict[str, int] = {}
    task = progress.add_task("bias correction", total=len(batches)) if progress is not None else None
    for batch in batches:
        r = dict(zip(names, ref.run(names, batch), strict=True))
        t = dict(zip(names, test.run(names, batch), strict=True))
        for name, axis in outputs:
            diff = np.moveaxis(t[name].astype(np.float64) - r[name].astype(np.float64), axis, -1)
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
