"""The non-finite guard (issue 35, item 6): an FP16 build whose outputs would be NaN/inf where FP32's are finite
gets FP32 islands named in the sidecar, or is refused with the node named.

Swin V2 (transformers, tiny config, random weights) at image size 24: its 6×6 patch grid is padded to 8×8 for
4×4 windows, the padded tokens' keys are exactly 0 (its key projection has no bias), and cosine attention
normalises them as ``k / Expand(Clip(|k|, 1e-12))``. The float pass keeps the Clip (its 1e-12) and the Div
(a computed divisor) in FP32, but the Expand between them ran in FP16 and flushed 1e-12 to 0: 0/0, NaN logits,
and the build exited 0.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
import torch
from cli_in_process import run
from onnx import TensorProto, helper

from trtforge.core.errors import Unsupported
from trtforge.passes.evaluate import run_ort, run_strict
from trtforge.passes.finite_guard import finite_process
from trtforge.passes.graph import load_ir

SIZE = 24


@pytest.fixture(scope="module")
def swinv2_onnx(tmp_path_factory):
    import transformers as T

    class Logits(torch.nn.Module):
        def __init__(self, model: torch.nn.Module) -> None:
            super().__init__()
            self.model = model

        def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
            return self.model(pixel_values).logits

    torch.manual_seed(0)
    config = T.Swinv2Config(image_size=SIZE, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2],
                            window_size=4, num_labels=10)
    module = Logits(T.Swinv2ForImageClassification(config)).eval()
    path = tmp_path_factory.mktemp("swinv2") / "swinv2.onnx"
    torch.onnx.export(module, (torch.zeros(1, 3, SIZE, SIZE),), str(path), input_names=["pixel_values"],
                      output_names=["logits"], opset_version=17, dynamo=False)
    return path


def test_swinv2_fp16_build_keeps_the_flushing_nodes_in_fp32(swinv2_onnx, tmp_path):
    done = run(["build", swinv2_onnx, "--precision", "fp16", "-o", tmp_path, "-q"])
    assert done.returncode == 0, done.stderr
    sidecar = json.loads((tmp_path / "swinv2_fp16.json").read_text())
    guarded = {name: why for name, why in sidecar["precision"]["fp32_nodes"].items()
               if why.startswith("non-finite guard")}
    assert any(name.endswith("attention/self/Expand") for name in guarded), guarded
    feeds = {"pixel_values": np.random.default_rng(1).standard_normal((1, 3, SIZE, SIZE)).astype(np.float32)}
    processed, reference = load_ir(tmp_path / "swinv2_fp16.onnx"), load_ir(tmp_path / "swinv2_reference_fp32.onnx")
    (expected,) = run_ort(reference, feeds)
    for runner in (run_ort, run_strict):  # ONNX Runtime, and each node in its declared type
        (logits,) = runner(processed, feeds)
        assert np.isfinite(logits).all()
        np.testing.assert_allclose(logits, expected, atol=2e-3)


def _flushed_epsilon() -> onnx.ModelProto:
    """y = x / Reshape(Clip(|x|, 1e-12)), the shape of Swin V2's normalisation: the float pass keeps the Clip (its
    epsilon) and the Div (a computed divisor) in FP32, the Reshape between them runs in FP16 and flushes 1e-12 to
    0, so y is 0/0 = NaN where x is 0 (FP32: 0)."""
    inits = [helper.make_tensor("eps", TensorProto.FLOAT, [], [1e-12]),
             helper.make_tensor("shape", TensorProto.INT64, [2], [1, 8])]
    nodes = [helper.make_node("Abs", ["x"], ["a"], name="abs"), helper.make_node("Clip", ["a", "eps"], ["c"], name="clip"),
             helper.make_node("Reshape", ["c", "shape"], ["r"], name="reshape"),
             helper.make_node("Div", ["x", "r"], ["y"], name="div")]
    graph = helper.make_graph(nodes, "normalize", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_guard_keeps_the_feeder_of_a_non_finite_fp32_node_or_refuses_naming_it():
    feeds = [{"x": np.array([[0.0, 0.0, 0.5, -2.0, 3.0, 0.0, 1.0, 4.0]], np.float32)}]
    processed = finite_process(load_ir(_flushed_epsilon()), "fp16", feeds)
    kept = processed.float_plan.fp32_nodes
    assert {"clip", "div"} <= set(kept) and kept["reshape"].startswith("non-finite guard: Reshape feeds Div 'div'")
    for runner in (run_ort, run_strict):
        np.testing.assert_array_equal(runner(processed.model, feeds[0])[0], [[0, 0, 1, -1, 1, 0, 1, 1]])
    with pytest.raises(Unsupported, match=r"output 'y' has 3 NaN/inf value\(s\) .*where FP32 has none.*"
                                          r"'reshape'.*keep_fp32=\['reshape'\]"):
        finite_process(load_ir(_flushed_epsilon()), "fp16", feeds, rounds=0)
