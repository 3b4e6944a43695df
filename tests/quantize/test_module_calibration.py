"""Calibration of a PyTorch module for the direct path: forward-hook ranges through the shared
calibrators, per-channel weight scales, and the ONNX path's placement rules and patterns."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tiny_model import QuantNet as Net

from trtforge.core.config import QuantConfig
from trtforge.passes.qdq import fp16_scales
from trtforge.quantize.module_calibration import calibrate_module


def _samples(n: int = 12) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    return [{"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)} for _ in range(n)]


def test_max_calibrator_gives_each_layer_its_input_absmax_and_per_channel_weight_scales():
    torch.manual_seed(0)
    model = Net().eval()
    samples = _samples()
    plan = calibrate_module(model, ["x"], samples, QuantConfig(calibrator="max", batch_size=5))
    x = torch.from_numpy(np.concatenate([s["x"] for s in samples]))
    with torch.no_grad():
        a_stem = torch.relu(model.stem(x))
        a_fc = torch.relu(model.dw(a_stem)).mean((2, 3))
    for path, seen in (("stem", x), ("dw", a_stem), ("fc", a_fc)):
        assert plan.input_scales[path] == fp16_scales([seen.abs().max().item() / 127])[0]
    w = model.dw.weight.detach().abs().flatten(1).amax(1) / 127
    assert plan.weight_scales["dw"] == fp16_scales(w.numpy())
    assert plan.samples == 12 and plan.calibrator == "max"


def test_default_rules_keep_the_3_channel_stem_and_the_head_in_fp16():
    plan = calibrate_module(Net().eval(), ["x"], _samples(), QuantConfig())
    assert plan.decisions["stem"].startswith("input channels 3 not a multiple of 32")
    assert plan.decisions["head"].startswith("final head")
    assert set(plan.int8_modules()) == {"dw", "fc"}
    assert {e["layer"] for e in plan.excluded()} == {"stem", "head"}


@pytest.mark.parametrize(("include", "exclude", "int8"), [
    ((), ("DepthwiseConv",), {"fc"}),        # a layer kind, as on the ONNX path
    (("stem",), (), {"stem", "dw", "fc"}),   # include overrides a rule
    (("fc",), ("fc",), {"dw"}),              # exclude wins over include
    ((), ("Gemm",), {"dw"}),                 # a Linear on a matrix is the ONNX op type Gemm
])
def test_include_and_exclude_mean_what_they_mean_on_the_onnx_path(include, exclude, int8):
    plan = calibrate_module(Net().eval(), ["x"], _samples(), QuantConfig(include=include, exclude=exclude))
    assert set(plan.int8_modules()) == int8
