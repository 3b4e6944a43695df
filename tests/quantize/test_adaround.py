"""Learned rounding (issue 25, item 2): on a fixed seed it lowers a real conv layer's output MSE against
round-to-nearest, the Q/DQ graph written with it gives that MSE in ONNX Runtime, and its report reaches the
sidecar of a real build."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch

from trtforge.capture.export import export_onnx
from trtforge.core import trt
from trtforge.core.config import ConfigError, QuantConfig, check_quant_options
from trtforge.passes.cleanup import cleanup
from trtforge.passes.graph import load_ir, ort_session, to_proto
from trtforge.passes.qdq import apply_plan, quantize_weight
from trtforge.quantize.methods.adaround import RoundingOptions, learn_rounding
from trtforge.quantize.quantizer import quantize_model


class Net(torch.nn.Module):
    """Conv → ReLU → strided Conv → ReLU → 1×1 Conv → mean: the middle conv reads real ReLU activations."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.c1 = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.c2 = torch.nn.Conv2d(16, 32, 3, padding=1, stride=2)
        self.c3 = torch.nn.Conv2d(32, 10, 1)

    def forward(self, x):
        return self.c3(torch.relu(self.c2(torch.relu(self.c1(x))))).mean((2, 3))


@pytest.fixture(scope="module")
def net(tmp_path_factory):
    path = tmp_path_factory.mktemp("adaround") / "net.onnx"
    raw = export_onnx(Net().eval(), (torch.zeros(1, 3, 32, 32),), path, input_names=["x"], output_names=["y"])
    x = np.random.default_rng(0).standard_normal((40, 3, 32, 32)).astype(np.float32)
    return cleanup(load_ir(raw)), x


def _layer_out(model, name: str, x: np.ndarray) -> np.ndarray:
    return ort_session(model, extra_outputs=[name]).run([name], {"x": x})[0].astype(np.float64)


@pytest.mark.slow
def test_learned_rounding_lowers_a_conv_layers_mse_and_ort_agrees(net):
    model, x = net
    result = quantize_model(model, x, QuantConfig(bias_correction=False, task="other", include=("Conv",)),
                            progress=False)
    layer = next(layer for layer in result.plan.layers if layer.label == "c2")
    one = result.plan.only([layer.output])  # only this layer quantized: its inputs are the FP32 graph's
    options = RoundingOptions(min_iters=300, max_iters=300, threads=1, seed=0)  # fixed work, not timed
    samples = x[:16]
    rounded, info = learn_rounding(result.fp32, one, [{"x": samples[:8]}, {"x": samples[8:]}], max_seconds=600,
                                   options=options)
    (record,) = info
    assert record["samples"] == 16 and record["applied"] and record["changed"] > 0
    assert record["mse_learned"] < 0.97 * record["mse_nearest"], record

    reference = _layer_out(result.fp32, layer.output, samples)
    nearest = np.mean((_layer_out(apply_plan(result.fp32, one), layer.output, samples) - reference) ** 2)
    learned = np.mean((_layer_out(apply_plan(rounded, one), layer.output, samples) - reference) ** 2)
    assert learned == pytest.approx(record["mse_learned"], rel=1e-3)
    assert nearest == pytest.approx(record["mse_nearest"], rel=1e-3)
    # Ordinary per-channel INT8: the same scales; the integers differ from round-to-nearest.
    weight = next(q for q in layer.inputs if q.is_weight)
    before = quantize_weight(result.fp32.graph.initializers["c2.weight"].const_value.numpy(), weight)
    after = quantize_weight(rounded.graph.initializers["c2.weight"].const_value.numpy(), weight)
    assert np.abs(after.astype(int) - before).max() == 1 and (after != before).mean() == pytest.approx(record["changed"])


def test_rounding_options_are_checked():
    with pytest.raises(ConfigError, match="rounding='up', rounding_seconds=120.0: choose one of nearest, learned, gptq"):
        QuantConfig(rounding="up")
    with pytest.raises(ConfigError, match="rounding_seconds=0"):
        QuantConfig(rounding_seconds=0)
    with pytest.raises(ConfigError, match=r"rounding=.learned. \(--rounding learned\) is for int8/int8-wo.*not fp8"):
        check_quant_options(QuantConfig(rounding="learned"), "fp8")
    assert QuantConfig().rounding == "nearest"


@pytest.mark.slow
@pytest.mark.skipif(not trt.info().is_rtx, reason="TensorRT-RTX builds")
def test_learned_rounding_report_is_in_the_sidecar(net, tmp_path):
    import trtforge

    model, x = net
    path = tmp_path / "net.onnx"
    onnx.save(to_proto(model), str(path))
    art = trtforge.compile(path, precision="int8", calibration_data=x, output_dir=tmp_path / "out",
                           progress=False, cache=False, allow_unaccelerated=True,
                           quant=QuantConfig(rounding="learned", rounding_seconds=3, include=("Conv",)))
    quant = art.sidecar.quantization
    assert quant.rounding == "learned"
    assert {layer["layer"] for layer in quant.learned_rounding["layers"]} == {"c1", "c2", "c3"}
    assert [m["method"] for m in quant.methods] == ["learned_rounding", "bias_correction"]
    for method in quant.methods:
        assert method["seconds"] > 0 and 0 < method["held_back"]["rel_l2_mean"] < 0.1
    saved = (tmp_path / "out").rglob("*.json")
    assert any('"learned_rounding"' in p.read_text() for p in saved)


@pytest.mark.slow
def test_auto_placement_measures_learned_weights_and_restores_the_float_ones(net):
    """placement='auto' with learned rounding: the rounding is learned on every candidate first, placement
    measures those weights, and a layer given back to FP16 keeps its original FP32 weight."""
    model, x = net
    config = QuantConfig(placement="auto", rounding="learned", rounding_seconds=15, task="other", error_budget=0.0015,
                         bias_correction=False)
    result = quantize_model(model, x, config, progress=False)
    report = result.report
    assert [m["method"] for m in report["methods"]] == ["learned_rounding"]
    learned = report["learned_rounding"]
    assert {layer["layer"] for layer in learned["layers"]} == {"c1", "c2", "c3"}
    assert learned["applied"] and learned["rel_l2_after"] < learned["rel_l2_before"], learned
    kept = {layer.label for layer in result.plan.layers}
    assert kept and kept != {"c1", "c2", "c3"}, kept  # the tight budget sends some layer back to FP16
    original = {name: v.const_value.numpy() for name, v in model.graph.initializers.items()}
    for label in ("c1", "c2", "c3"):
        now = result.fp32.graph.initializers[f"{label}.weight"].const_value.numpy()
        changed = next(r["changed"] for r in report["learned_rounding"]["layers"] if r["layer"] == label)
        if label in kept:
            assert (now != original[f"{label}.weight"]).mean() == pytest.approx(changed, abs=1e-9)
        else:
            np.testing.assert_array_equal(now, original[f"{label}.weight"])
