"""Calibration of a PyTorch module for the direct path: forward-hook ranges through the shared
calibrators, per-channel weight scales, and the ONNX path's placement rules and patterns."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tiny_model import QuantNet as Net

from trtforge.core.config import QuantConfig
from trtforge.core.quant_plan import QuantPlan
from trtforge.passes.qdq import fp16_scales
from trtforge.quantize.module_calibration import calibrate_module


def _samples(n: int = 12) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    return [{"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)} for _ in range(n)]


def test_max_calibrator_gives_each_layer_its_input_absmax_and_per_channel_weight_scales():
    torch.manual_seed(0)
    model = Net().eval()
    samples = _samples()
    # include= places the 3-channel stem in INT8 too, so the plan holds its scales
    plan = calibrate_module(model, ["x"], samples, QuantConfig(calibrator="max", batch_size=5, include=("stem",)))
    assert isinstance(plan, QuantPlan) and plan.precision == "int8"
    x = torch.from_numpy(np.concatenate([s["x"] for s in samples]))
    with torch.no_grad():
        a_stem = torch.relu(model.stem(x))
        a_fc = torch.relu(model.dw(a_stem)).mean((2, 3))
    for path, seen in (("stem", x), ("dw", a_stem), ("fc", a_fc)):
        assert plan.layer(path).activation.scales == fp16_scales([seen.abs().max().item() / 127])
        assert plan.layer(path).activation.dtype == "int8" and plan.layer(path).activation.axis is None
    w = model.dw.weight.detach().abs().flatten(1).amax(1) / 127
    weight = plan.layer("dw").weight
    assert weight.scales == fp16_scales(w.numpy()) and weight.axis == 0 and weight.tensor == "dw.weight"
    assert plan.calibrator == "max"
    # MACs as the ONNX path counts them (per sample): conv 3x3 over 8x8, depthwise 3x3, then 32 → 16
    assert [(layer.label, layer.macs) for layer in plan.layers] == [
        ("stem", 32 * 64 * 27), ("dw", 32 * 64 * 9), ("fc", 16 * 32)]


def test_default_rules_keep_the_3_channel_stem_and_the_head_in_fp16():
    plan = calibrate_module(Net().eval(), ["x"], _samples(), QuantConfig())
    reasons = dict(plan.excluded)
    assert reasons["stem"].startswith("input channels 3 not a multiple of 32")
    assert reasons["head"].startswith("final head")
    assert {layer.label for layer in plan.layers} == {"dw", "fc"}
    assert set(reasons) == {"stem", "head"}


@pytest.mark.parametrize(("include", "exclude", "int8"), [
    ((), ("DepthwiseConv",), {"fc"}),        # a layer kind, as on the ONNX path
    (("stem",), (), {"stem", "dw", "fc"}),   # include overrides a rule
    (("fc",), ("fc",), {"dw"}),              # exclude wins over include
    ((), ("Gemm",), {"dw"}),                 # a Linear on a matrix is the ONNX op type Gemm
])
def test_include_and_exclude_mean_what_they_mean_on_the_onnx_path(include, exclude, int8):
    plan = calibrate_module(Net().eval(), ["x"], _samples(), QuantConfig(include=include, exclude=exclude))
    assert {layer.label for layer in plan.layers} == int8
