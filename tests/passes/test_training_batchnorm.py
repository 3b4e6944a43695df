"""Weight standardization as TorchScript exports it (transformers' BiT): the conv weights pass through a
``BatchNormalization(training_mode=1)`` of constants, which TensorRT's parser refuses. cleanup folds it."""

from __future__ import annotations

import collections

import numpy as np
import onnx
import pytest
import torch

from trtforge.core import trt
from trtforge.passes.cleanup import cleanup
from trtforge.passes.graph import load_ir, ort_session


class StandardizedConv(torch.nn.Conv2d):
    """BiT's ``WeightStandardizedConv2d``: each filter normalised to mean 0, variance 1 before the convolution."""

    def forward(self, x):
        weight = torch.nn.functional.batch_norm(self.weight.reshape(1, self.out_channels, -1), None, None,
                                                training=True, momentum=0.0, eps=1e-6).reshape_as(self.weight)
        return torch.nn.functional.conv2d(x, weight, self.bias, self.stride, self.padding)


@pytest.fixture(scope="module")
def standardized(tmp_path_factory):
    torch.manual_seed(0)
    model = torch.nn.Sequential(StandardizedConv(3, 8, 3, padding=1), torch.nn.ReLU(),
                                StandardizedConv(8, 4, 3, padding=1)).eval()
    path = tmp_path_factory.mktemp("ws") / "ws.onnx"
    torch.onnx.export(model, (torch.randn(1, 3, 16, 16),), str(path), dynamo=False, opset_version=17,
                      input_names=["x"], output_names=["y"])
    return path


def test_constant_training_batchnorms_fold_and_keep_the_numbers(standardized):
    proto = onnx.load(standardized)
    assert [n.attribute[-1].i for n in proto.graph.node if n.op_type == "BatchNormalization"] == [1, 1]
    cleaned = cleanup(load_ir(standardized))
    ops = collections.Counter(n.op_type for n in cleaned.graph)
    assert ops["BatchNormalization"] == 0 and ops["Conv"] == 2, ops
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    reference = ort_session(proto).run(None, {"x": x})[0]
    np.testing.assert_allclose(ort_session(cleaned).run(None, {"x": x})[0], reference, rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(not trt.available(), reason="no TensorRT bindings installed")
def test_tensorrt_rtx_builds_it(standardized):
    """It was refused: 'cannot parse ws.onnx: node ... (BatchNormalization): ... training_mode == 1'."""
    from cli_in_process import run

    done = run(["build", standardized.name, "--precision", "fp16", "-q", "--opt-level", "0"],
               cwd=standardized.parent)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.skipif(not trt.available(), reason="no TensorRT bindings installed")
def test_inspect_asks_the_parser_about_the_graph_build_hands_it(standardized):
    """``inspect`` said the parser refuses the file (exit 1) though ``build`` takes it: it now asks again after
    the cleanup every build runs, and notes what that folded away."""
    from cli_in_process import run

    from trtforge.debug.onnx_inspect import describe_onnx

    info = describe_onnx(standardized)
    assert info.refused == [], info.refused
    assert any("2 node(s) of the file as written" in n and "BatchNormalization" in n for n in info.notes), info.notes
    done = run(["inspect", standardized.name], cwd=standardized.parent)
    assert done.returncode == 0 and "accepts every node" in done.stdout, done.stdout + done.stderr
