"""INT8 on the direct path: the Q/DQ layers' evaluator semantics against PyTorch's fake quantization,
converters that wrap a quantized module's input and weight, and real TensorRT-RTX builds."""

from __future__ import annotations

import pytest
import torch
from tiny_model import QuantNet
from torch import nn

from trtforge.convert.api import build_lowered, lower_module
from trtforge.convert.evaluator import evaluate
from trtforge.convert.int8 import qdq
from trtforge.convert.network import Network
from trtforge.core.quant_plan import QuantInput, QuantLayer, QuantPlan


def int8_plan(layers: dict[str, tuple[float, tuple[float, ...]]], op_type: str = "Conv") -> QuantPlan:
    """The one quantization plan of the direct path: module path → (input scale, per-channel weight scales)."""
    return QuantPlan(tuple(QuantLayer(path, op_type, path, (QuantInput(0, path, (act,)),
                                                            QuantInput(1, f"{path}.weight", w, axis=0, is_weight=True)))
                           for path, (act, w) in layers.items()))


def _qdq_network(scale: torch.Tensor, axis: int, shape=(-1, 4, 3, 5)) -> Network:
    net = Network("qdq")
    x = net.input("x", torch.float32, shape)
    net.output(qdq(net, x, scale, axis), "y")
    return net


def test_per_tensor_qdq_matches_torch_fake_quantize_with_ties_and_clamping():
    scale = 0.05
    torch.manual_seed(0)
    x = torch.randn(2, 4, 3, 5) * 4  # |x| up to ~12: beyond 127 · 0.05 = 6.35, so clamping is exercised
    x[0, 0, 0, :4] = torch.tensor([0.025, 0.075, -0.025, -0.125])  # exact ties: round half to even
    net = _qdq_network(torch.tensor(scale), 0)
    got = evaluate(net.record, {"x": x})[0]
    expected = torch.fake_quantize_per_tensor_affine(x, scale, 0, -128, 127)
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    assert got[0, 0, 0, :4].tolist() == pytest.approx([0.0, 0.1, 0.0, -0.1])
    assert got.max().item() == pytest.approx(127 * scale) and got.min().item() == pytest.approx(-128 * scale)
    assert build_lowered(net, (1, 2, 4), optimization_level=0).plan


def test_per_channel_qdq_matches_torch_fake_quantize_per_channel():
    torch.manual_seed(1)
    x = torch.randn(2, 4, 3, 5) * 3
    scales = torch.tensor([0.01, 0.02, 0.05, 0.1])
    net = _qdq_network(scales, 1)
    got = evaluate(net.record, {"x": x})[0]
    expected = torch.fake_quantize_per_channel_affine(x, scales, torch.zeros(4, dtype=torch.int32), 1, -128, 127)
    torch.testing.assert_close(got, expected, rtol=0, atol=0)


def _fake(x, scale):
    return torch.fake_quantize_per_tensor_affine(x, scale, 0, -128, 127)


def _fake_weight(w, scales):
    return torch.fake_quantize_per_channel_affine(w, torch.tensor(scales), torch.zeros(len(scales), dtype=torch.int32),
                                                  0, -128, 127)


def _reference(model: QuantNet, x: torch.Tensor, scales: dict[str, tuple]) -> torch.Tensor:
    """The PyTorch fake-quant reference: each quantized layer sees Q/DQ'd input and weight."""
    s = scales
    x = torch.relu(nn.functional.conv2d(_fake(x, s["stem"][0]), _fake_weight(model.stem.weight, s["stem"][1]),
                                        model.stem.bias, padding=1))
    x = torch.relu(model.dw(x)).mean((2, 3))  # "dw" and "head" are not in the plan: they stay float
    x = nn.functional.linear(_fake(x, s["fc"][0]), _fake_weight(model.fc.weight, s["fc"][1]), model.fc.bias)
    return model.head(torch.relu(x))


def _scales(model: QuantNet) -> dict[str, tuple[float, tuple[float, ...]]]:
    def per_channel(w):
        return tuple((w.detach().abs().flatten(1).amax(1) / 127).tolist())
    return {"stem": (0.02, per_channel(model.stem.weight)), "fc": (0.004, per_channel(model.fc.weight))}


def _lower_and_run(precision: str):
    """QuantNet with stem and fc in INT8, lowered at ``precision``: (lowered, evaluator output, reference)."""
    torch.manual_seed(0)
    model = QuantNet().eval()
    scales = _scales(model)
    lowered = lower_module(model, (torch.randn(2, 3, 8, 8),), batch=(1, 2, 4), precision=precision,
                           int8=int8_plan(scales))
    x = torch.randn(3, 3, 8, 8)
    with torch.no_grad():
        return lowered, evaluate(lowered.net.record, {"x": x})[0], _reference(model, x, scales), model(x)


@pytest.mark.slow
def test_conv_and_linear_of_named_modules_get_qdq_and_match_the_fake_quant_reference():
    lowered, got, expected, plain = _lower_and_run("fp32")
    assert set(lowered.int8_layers) == {"stem", "fc"}
    kinds = lowered.net.record.kinds()
    assert kinds["quantize"] == 4 and kinds["dequantize"] == 4  # input + weight of two layers
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    assert (got - plain).abs().max() > 5e-4  # the quantization is really there (5x the tolerance)
    assert build_lowered(lowered.net, (1, 2, 4), optimization_level=0).plan


@pytest.mark.slow
def test_int8_under_fp16_builds_and_stays_close_to_the_reference():
    lowered, got, expected, _plain = _lower_and_run("fp16")
    torch.testing.assert_close(got, expected, rtol=2e-2, atol=2e-2)
    assert build_lowered(lowered.net, (1, 2, 4), optimization_level=0).plan


def test_no_scales_means_no_qdq():
    lowered = lower_module(QuantNet().eval(), (torch.randn(2, 3, 8, 8),), precision="fp32",
                           int8=QuantPlan(()))
    assert "quantize" not in lowered.net.record.kinds() and lowered.int8_layers == {}


@pytest.mark.slow
def test_efficientnet_lite0_int8_builds_with_tensorrt(lite0):
    from trtforge.core.config import QuantConfig
    from trtforge.quantize.module_calibration import calibrate_module
    from trtforge.zoo.photos import normalize, photo_crops

    pp = lite0.preprocessing
    crops = normalize(photo_crops(16, seed=12), pp)
    plan = calibrate_module(lite0, ["x"], [{"x": crops[i:i + 1]} for i in range(16)], QuantConfig(batch_size=8))
    lowered = lower_module(lite0, (torch.zeros(2, 3, 224, 224),), batch=(1, 2, 4), precision="fp16", int8=plan)
    assert set(lowered.int8_layers) == {layer.output for layer in plan.layers} and len(lowered.int8_layers) > 20
    assert build_lowered(lowered.net, (1, 2, 4), optimization_level=0).plan


class ExpandedLinear(nn.Module):
    """A Linear on an expanded input: torch decomposes it to a bmm with the weight expanded over the batch."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 4)

    def forward(self, x):
        return self.proj(x.unsqueeze(1).expand(-1, 3, -1))


@pytest.mark.slow
def test_a_weight_expanded_over_a_dynamic_batch_stays_float_and_is_not_claimed():
    scales = int8_plan({"proj": (0.01, (0.01,) * 4)}, "MatMul")
    dynamic = lower_module(ExpandedLinear().eval(), (torch.randn(2, 8),), batch=(1, 2, 4), int8=scales)
    assert dynamic.int8_layers == {} and "quantize" not in dynamic.net.record.kinds()
    static = lower_module(ExpandedLinear().eval(), (torch.randn(2, 8),), int8=scales)  # the weight folds
    assert static.int8_layers == {"proj": "bmm"}
