"""Observers on activations that are not ordinary floats: subnormal ranges and non-finite values (issue 35).

MobileViT from a tiny config with random weights (std 0.02) shrinks its activations to subnormal floats
(|x|max 1e-41 in its last stage): the histogram's bin factor ``num_bins / range`` overflowed FP32 there,
``0 × inf`` gave NaN bin indices, and calibration crashed in ``np.bincount``.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

from trtforge.core.config import QuantConfig
from trtforge.core.quant_plan import QUANT_DTYPES
from trtforge.quantize.calibrators import calibrate
from trtforge.quantize.observers import Histogram, observe
from trtforge.quantize.quantizer import quantize_model


def test_histogram_of_subnormal_values():
    x = np.array([0.0, 1e-41, 5e-42, 2.5e-42, 1.4e-45], dtype=np.float32)
    h = Histogram()
    h.update(x)
    assert h.amax == pytest.approx(float(x.max())) and h.counts.sum() == x.size and h.zeros == 1
    assert h.counts[-1] == 1  # 1e-41 is the range: the last bin
    direct, _ = np.histogram(x.astype(np.float64), bins=h.num_bins, range=(0.0, h.range))
    assert np.abs(np.cumsum(h.counts) - np.cumsum(direct)).max() <= 1
    assert 0 < calibrate(h, "mse") <= h.amax
    with np.errstate(divide="raise", invalid="raise"):  # FP8's grid: amax / 448 underflows FP32 at the smallest candidates
        assert 0 < calibrate(h, "mse", qtype=QUANT_DTYPES["float8e4m3fn"]) <= h.amax


def test_histogram_counts_non_finite_values_apart():
    h = Histogram()
    h.update(np.array([1.0, -3.0, np.nan, np.inf, -np.inf, 0.5], dtype=np.float32))
    assert (h.nonfinite, h.amax, h.range, int(h.counts.sum())) == (3, 3.0, 3.0, 3)
    h.update(np.array([np.nan, np.nan], dtype=np.float32))  # a batch of nothing but NaN: counted, no range
    assert (h.nonfinite, h.amax, int(h.counts.sum())) == (5, 3.0, 3)
    assert calibrate(h, "max") == 3.0


def test_observe_warns_naming_the_non_finite_tensor(caplog):
    # log(x) is -inf where x is 0: the FP32 graph itself gives it on this data.
    graph = helper.make_graph(
        [helper.make_node("Log", ["x"], ["log_x"], name="log"), helper.make_node("Abs", ["log_x"], ["y"], name="abs")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    batches = [{"x": np.array([[0.0, 1.0, 2.0, 4.0]], dtype=np.float32)}] * 2
    with caplog.at_level(logging.WARNING, logger="trtforge"):
        stats = observe(model, ["log_x", "x"], batches)
    assert stats.histograms["log_x"].nonfinite == 2
    assert stats.histograms["log_x"].amax == pytest.approx(np.log(4.0))
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "'log_x'" in warned[0] and "2 of 8" in warned[0] and "'x'" not in warned[0]


@pytest.fixture(scope="module")
def mobilevit_onnx(tmp_path_factory):
    """transformers' MobileViT from a tiny config, random weights, TorchScript export: its last stage's
    activations are subnormal."""
    import transformers as T

    class Logits(torch.nn.Module):
        def __init__(self, model: torch.nn.Module) -> None:
            super().__init__()
            self.model = model

        def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
            return self.model(pixel_values).logits

    torch.manual_seed(0)
    config = T.MobileViTConfig(image_size=32, hidden_sizes=[16, 24, 32], neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 64],
                               num_attention_heads=2, num_labels=10)
    module = Logits(T.MobileViTForImageClassification(config)).eval()
    path = tmp_path_factory.mktemp("mobilevit") / "mobilevit.onnx"
    torch.onnx.export(module, (torch.zeros(1, 3, 32, 32),), str(path), input_names=["pixel_values"],
                      output_names=["logits"], opset_version=17, dynamo=False)
    return path


def test_mobilevit_calibrates(mobilevit_onnx):
    data = np.random.default_rng(0).standard_normal((4, 3, 32, 32)).astype(np.float32)
    result = quantize_model(onnx.load(str(mobilevit_onnx)), data, QuantConfig(calibrator="mse"), progress=False)
    assert result.plan.layers
    scales = [s for layer in result.plan.layers for q in layer.inputs for s in q.scales]
    assert all(np.isfinite(scales)) and min(scales) > 0
