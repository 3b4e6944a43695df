"""The direct path's INT8 through the one ``QuantPlan``: the same plan as the ONNX path for the same data,
bias correction that matches the ONNX path's, and a held-back report that measures what the lowered
network computes."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from tiny_model import QuantNet

import trtforge
from trtforge.capture.export import export_onnx
from trtforge.convert.api import lower_module
from trtforge.convert.evaluator import evaluate
from trtforge.core.config import QuantConfig
from trtforge.core.errors import AccuracyBudgetMissed
from trtforge.core.quant_plan import QuantPlan
from trtforge.passes.graph import ensure_node_names, ensure_opset, fresh_ir, nodes_by_output
from trtforge.quantize.data import batches
from trtforge.quantize.methods.bias_correction import correct_biases, find_bias
from trtforge.quantize.module_quantizer import quantize_module
from trtforge.quantize.module_sim import corrected_copy
from trtforge.quantize.quantizer import quantize_model
from trtforge.quantize.report import compare_outputs

#: stem placed in INT8 against the 3-channel rule, fc kept out by pattern: the ONNX path's MLP pairing
#: rule (which the direct path has no graph for) then has nothing to decide.
CONFIG = QuantConfig(calibrator="max", include=("stem",), exclude=("fc",), bias_correction=False)


def _model() -> QuantNet:
    torch.manual_seed(0)
    return QuantNet().eval()


def _calib(n: int = 20) -> np.ndarray:
    return np.random.default_rng(0).standard_normal((n, 3, 8, 8)).astype(np.float32)


def _samples(x: np.ndarray) -> list[dict[str, np.ndarray]]:
    return [{"x": x[i:i + 1]} for i in range(len(x))]


@pytest.fixture(scope="module")
def onnx_model(tmp_path_factory) -> onnx.ModelProto:
    path = export_onnx(_model(), (torch.zeros(1, 3, 8, 8),), tmp_path_factory.mktemp("qnet") / "qnet.onnx",
                       input_names=["x"], output_names=["y"], dynamic_batch=True)
    return onnx.load(str(path))


def _by_label(plan: QuantPlan) -> dict[str, tuple]:
    return {layer.label: (layer.op_type, layer.macs, layer.activation.scales, layer.weight.scales)
            for layer in plan.layers}


@pytest.mark.slow
def test_direct_and_onnx_paths_compute_one_plan_type_with_the_same_scales(onnx_model):
    x = _calib()
    via_onnx = quantize_model(onnx_model, x, CONFIG, progress=False)
    direct = quantize_module(_model(), ["x"], _samples(x), CONFIG)
    assert type(via_onnx.plan) is type(direct.plan) is QuantPlan
    onnx_layers, direct_layers = _by_label(via_onnx.plan), _by_label(direct.plan)
    assert list(direct_layers) == list(onnx_layers) == ["stem", "dw"]
    for label, (op, macs, act, weight) in onnx_layers.items():
        d_op, d_macs, d_act, d_weight = direct_layers[label]
        assert (d_op, d_macs) == (op, macs), label
        assert d_act == pytest.approx(act, rel=1e-3) and d_weight == pytest.approx(weight, rel=1e-3), label
    assert direct.plan.excluded == via_onnx.plan.excluded  # (label, reason): the same rules said the same
    assert direct.plan.total_macs == via_onnx.plan.total_macs and direct.plan.coverage == via_onnx.plan.coverage
    assert (direct.plan.precision, direct.plan.calibrator) == (via_onnx.plan.precision, via_onnx.plan.calibrator)
    # the report: the same keys from the same code, on the same held-back split
    assert direct.report["samples"] == via_onnx.report["samples"] == {"calibration": 16, "held_back": 4}
    assert set(via_onnx.report) - set(direct.report) <= {"cache", "graph_sha256", "smoothquant"}
    assert direct.report["data_sha256"] == via_onnx.report["data_sha256"]


def test_direct_bias_correction_shifts_the_biases_the_onnx_path_shifts(onnx_model):
    x = _calib()
    calib = batches(_samples(x[:16]), 8)
    via_onnx = quantize_model(onnx_model, x, CONFIG, progress=False)
    model = ensure_node_names(ensure_opset(fresh_ir(onnx_model), 19))
    corrected_ir, info = correct_biases(model, via_onnx.plan, calib)
    module = _model()
    corrected, layers = corrected_copy(module, ["x"], quantize_module(module, ["x"], _samples(x), CONFIG).plan, calib)
    assert layers == len(info) == 2
    nodes = nodes_by_output(model.graph)
    for layer in via_onnx.plan.layers:
        name, _ = find_bias(nodes[layer.output])
        before = model.graph.initializers[name].const_value.numpy()
        onnx_shift = before - corrected_ir.graph.initializers[name].const_value.numpy()
        direct_shift = (getattr(module, layer.label).bias - getattr(corrected, layer.label).bias).detach().numpy()
        assert np.abs(onnx_shift).max() > 1e-6, layer.label  # there is a shift to correct
        np.testing.assert_allclose(direct_shift, onnx_shift, rtol=0.02, atol=0.02 * np.abs(onnx_shift).max())
    assert torch.equal(module.stem.bias, _model().stem.bias)  # the caller's module is left as it was


@pytest.mark.slow
def test_the_held_back_report_measures_what_the_lowered_network_computes():
    x = _calib()
    model = _model()
    result = quantize_module(model, ["x"], _samples(x), QuantConfig(calibrator="max", include=("stem",)))
    held = torch.from_numpy(x[16:])
    lowered = lower_module(result.model, (torch.zeros(2, 3, 8, 8),), batch=(1, 2, 4), precision="fp32",
                           int8=result.plan)
    assert set(lowered.int8_layers) == {"stem", "dw", "fc"}
    with torch.no_grad():
        ref = model(held).numpy()
    got = evaluate(lowered.net.record, {"x": held})[0].numpy()
    measured = compare_outputs([ref], [got])
    assert result.report["measured"]["rel_l2_mean"] == pytest.approx(measured["rel_l2_mean"], rel=1e-2)
    assert measured["rel_l2_mean"] > 1e-5  # INT8 really changed the output
    assert result.report["error_budget"]["holds"] is True and result.report["task"] == "other"


@pytest.mark.slow
def test_a_direct_int8_build_and_an_onnx_int8_build_write_the_same_report(tmp_path):
    x = _calib()
    common = dict(precision="int8", calibration_data=x, batch=(1, 2, 4), allow_unaccelerated=True, progress=False,
                  input_names=("x",), cache_dir=tmp_path / "cache", quant=CONFIG)
    direct = trtforge.compile(_model(), (torch.zeros(1, 3, 8, 8),), path="direct", output_dir=tmp_path / "direct",
                              **common).sidecar.quantization
    via_onnx = trtforge.compile(_model(), (torch.zeros(1, 3, 8, 8),), path="onnx", output_dir=tmp_path / "onnx",
                                **common).sidecar.quantization
    for field in ("precision", "calibrator", "samples", "int8_layers", "layers_total", "excluded_layers",
                  "coverage", "task", "placement"):
        assert getattr(direct, field) == getattr(via_onnx, field), field
    assert direct.samples == {"calibration": 16, "held_back": 4}
    assert direct.measured["rel_l2_mean"] == pytest.approx(via_onnx.measured["rel_l2_mean"], rel=0.1)
    assert direct.error_budget["holds"] and direct.error_budget["task"] == "other"
    assert direct.bias_correction is False  # asked off, recorded as asked, as on the ONNX path
    biased = trtforge.compile(_model(), (torch.zeros(1, 3, 8, 8),), path="direct", output_dir=tmp_path / "bc",
                              **{**common, "quant": QuantConfig(calibrator="max")}).sidecar.quantization
    assert set(biased.bias_correction) == {"applied", "rel_l2_before", "rel_l2_after", "layers"}
    assert biased.bias_correction["layers"] == biased.int8_layers == 2


@pytest.mark.slow
def test_a_direct_int8_build_that_misses_its_error_budget_is_refused_under_strict_accuracy(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(AccuracyBudgetMissed, match="misses its error budget"):
        trtforge.compile(_model(), (torch.zeros(1, 3, 8, 8),), path="direct", precision="int8",
                         calibration_data=_calib(), batch=(1, 2, 4), allow_unaccelerated=True, progress=False,
                         quant=QuantConfig(calibrator="max", include=("stem",), task="other", error_budget=1e-9),
                         strict_accuracy=True, output_dir=out, cache=False)
    assert not out.exists() or not any(out.iterdir())  # nothing written
