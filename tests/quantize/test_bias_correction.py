"""Bias correction removes the mean output shift that INT8 introduces, without adding nodes."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
from onnx import helper, numpy_helper

from trtforge.core.config import QuantConfig
from trtforge.quantize.quantizer import quantize_model
from trtforge.quantize.report import run_model


def synthetic_layer(seed: int = 0) -> onnx.ModelProto:
    """Conv (bias) → Relu → Conv (bias): small weights with a dominant one per channel, so per-channel
    INT8 rounding of the small ones shifts every output channel systematically."""
    rng = np.random.default_rng(seed)
    w1 = rng.normal(0, 0.02, (32, 32, 3, 3)).astype(np.float32)
    w1[:, 0, 1, 1] = 1.0  # the channel max is 1, so the step is 1/127: the ±0.02 weights round coarsely
    w2 = rng.normal(0, 0.02, (32, 32, 1, 1)).astype(np.float32)
    w2[:, 1, 0, 0] = 1.0
    inits = [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(rng.normal(0, 0.1, 32).astype(np.float32), "b1"),
             numpy_helper.from_array(w2, "w2"), numpy_helper.from_array(rng.normal(0, 0.1, 32).astype(np.float32), "b2")]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu"),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["y"], name="conv2")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 32, 16, 16])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


def test_bias_correction_reduces_mean_shift():
    model = synthetic_layer()
    rng = np.random.default_rng(1)
    calib = rng.uniform(0, 1, (64, 32, 16, 16)).astype(np.float32)  # positive mean: a shift does not average out
    held = [{"x": rng.uniform(0, 1, (16, 32, 16, 16)).astype(np.float32)}]
    config = QuantConfig(calibrator="max", include=("conv",), holdout=0.25, bias_correction=False)
    plain = quantize_model(model, calib, config, progress=False)
    corrected = quantize_model(model, calib, QuantConfig(calibrator="max", include=("conv",), holdout=0.25,
                                                         bias_correction=True), progress=False)
    ref = run_model(model, held)[0]
    shift_plain = (run_model(plain.sim_model, held)[0] - ref).mean(axis=(0, 2, 3))
    shift_corr = (run_model(corrected.sim_model, held)[0] - ref).mean(axis=(0, 2, 3))
    assert np.abs(shift_plain).mean() > 1e-3  # the synthetic layer really has a shift to correct
    assert np.abs(shift_corr).mean() < 0.3 * np.abs(shift_plain).mean()
    # No new op: the corrected graph has the same nodes, only bias values differ.
    assert Counter(n.op_type for n in corrected.fp32_model.graph.node) == Counter(n.op_type for n in model.graph.node)
    info = corrected.report["bias_correction"]
    assert info["applied"] and info["layers"] == 2 and info["rel_l2_after"] < info["rel_l2_before"]
    b_before = {t.name: numpy_helper.to_array(t) for t in plain.fp32_model.graph.initializer}["b2"]
    b_after = {t.name: numpy_helper.to_array(t) for t in corrected.fp32_model.graph.initializer}["b2"]
    assert not np.allclose(b_before, b_after)
