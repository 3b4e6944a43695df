"""``check`` names non-finite outputs as such (issue 35, item 6), not as a metric that missed ("top1_agreement 0").

The graph is Swin V2's normalisation in small: y = x / Reshape(Clip(|x|, 1e-12)). Its FP16 build keeps the Clip
and the Div in FP32 and the Reshape in FP16, which flushes 1e-12 to 0: y is 0/0 = NaN where x is exactly 0. The
build's example inputs (standard normal) hold no zero, so the build's non-finite guard keeps nothing; the inputs
checked here hold zeros, and check must say where the NaNs are.
"""

from __future__ import annotations

import numpy as np
import onnx
from cli_in_process import run
from onnx import TensorProto, helper

from trtforge.debug.inputs import save_npz


def _normalize_onnx(path):
    inits = [helper.make_tensor("eps", TensorProto.FLOAT, [], [1e-12]),
             helper.make_tensor("shape", TensorProto.INT64, [2], [-1, 8])]
    nodes = [helper.make_node("Abs", ["x"], ["a"], name="abs"), helper.make_node("Clip", ["a", "eps"], ["c"], name="clip"),
             helper.make_node("Reshape", ["c", "shape"], ["r"], name="reshape"),
             helper.make_node("Div", ["x", "r"], ["y"], name="div")]
    graph = helper.make_graph(nodes, "normalize", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])], initializer=inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_check_names_the_nan_outputs_and_their_samples(tmp_path):
    built = run(["build", _normalize_onnx(tmp_path / "normalize.onnx"), "--precision", "fp16", "-o", tmp_path, "-q"])
    assert built.returncode == 0, built.stderr
    x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    x[1, :3] = 0.0
    x[3, 5] = 0.0
    save_npz(tmp_path / "inputs.npz", {"x": x})
    done = run(["check", tmp_path / "normalize_fp16.json", "--route", "onnxruntime", "--inputs", tmp_path / "inputs.npz",
                "--repeats", "1"])
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAIL: output 'y' has 4 NaN/inf value(s) in 2 sample(s); FP32 has none" in done.stdout
    assert "rel_l2 nan" not in done.stdout
