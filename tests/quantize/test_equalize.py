"""Cross-layer equalization (issue 25, item 1): the FP32 function is kept (ONNX Runtime within 1e-5) on a
ReLU6 chain built to clip and on EfficientNet-Lite0, the ranges of each pair end up equal, and what cannot
be equalized is left alone."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from trtforge.capture.export import export_onnx
from trtforge.passes.cleanup import cleanup
from trtforge.passes.graph import copy_model, load_ir, ort_session
from trtforge.quantize.methods.equalize import equalize, find_pairs


class ClippingChain(torch.nn.Module):
    """Conv → ReLU6 → depthwise Conv → ReLU6 → Conv, with channel ranges 20× apart and biases that push
    about a sixth of the first activations past 6 (so a clip bound left unscaled would change the output)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.c1 = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.c2 = torch.nn.Conv2d(16, 16, 3, padding=1, groups=16)
        self.c3 = torch.nn.Conv2d(16, 8, 1)
        with torch.no_grad():
            self.c1.weight[::2] *= 20
            self.c1.bias[::3] += 3

    def forward(self, x):
        return self.c3(torch.nn.functional.relu6(self.c2(torch.nn.functional.relu6(self.c1(x)))))


def _onnx(module: torch.nn.Module, shape, path):
    raw = export_onnx(module.eval(), (torch.zeros(*shape),), path, input_names=["x"], output_names=["y"])
    return cleanup(load_ir(raw))


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    """``ClippingChain`` exported once for the module (seeded: every export has the same weights); tests take a copy."""
    return _onnx(ClippingChain(), (1, 3, 16, 16), tmp_path_factory.mktemp("chain") / "chain.onnx")


def _same(a, b, x) -> float:
    name = a.graph.inputs[0].name
    ya, yb = (ort_session(m).run(None, {name: x})[0] for m in (a, b))
    return float(np.abs(ya - yb).max() / np.abs(ya).max())


@pytest.mark.slow
def test_a_relu6_chain_that_clips_keeps_its_outputs(chain):
    module = ClippingChain()
    x = torch.randn(4, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    assert (module.c1(x) > 6).float().mean() > 0.1  # the clip really bites
    model = copy_model(chain)
    equalized, info = equalize(model)
    assert info["pairs"] == 2 and info["s_max"] > 2  # the factors are far from 1: a real change
    assert _same(model, equalized, x.numpy()) < 1e-5
    ops = [n.op_type for n in equalized.graph]
    assert "Clip" not in ops and ops.count("Min") == ops.count("Max") == 2  # per-channel bounds
    for pair in find_pairs(equalized):  # each pair's channel ranges now agree
        w1 = pair.first.inputs[1].const_value.numpy()
        w2 = pair.second.inputs[1].const_value.numpy()
        r1 = np.abs(w1.reshape(w1.shape[0], -1)).max(axis=1)
        r2 = np.abs(w2.reshape(w2.shape[0], -1)).max(axis=1) if pair.depthwise else \
            np.abs(np.swapaxes(w2, 0, 1).reshape(w2.shape[1], -1)).max(axis=1)
        assert np.abs(np.log(r1 / r2)).max() < 0.05


@pytest.mark.slow
def test_unscaled_clip_bounds_would_change_the_outputs(chain):
    """The check above can fail: the same weights with the original scalar ReLU6 are a different function."""
    model = copy_model(chain)
    equalized, _ = equalize(model)
    original = copy_model(chain)
    for name, value in equalized.graph.initializers.items():
        if name in original.graph.initializers and value.const_value is not None:
            original.graph.initializers[name].const_value = value.const_value  # new weights, old scalar clips
    x = np.random.default_rng(2).standard_normal((4, 3, 16, 16)).astype(np.float32)
    assert _same(model, original, x) > 1e-2


@pytest.mark.slow
def test_a_shared_middle_tensor_is_not_equalized(tmp_path):
    class Fork(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c1, self.c2 = torch.nn.Conv2d(3, 8, 3), torch.nn.Conv2d(8, 8, 1)

        def forward(self, x):
            y = torch.relu(self.c1(x))
            return self.c2(y) + y  # the ReLU output feeds the Add too: scaling it would change the sum

    model = _onnx(Fork(), (1, 3, 8, 8), tmp_path / "fork.onnx")
    equalized, info = equalize(model)
    assert info["pairs"] == 0 and find_pairs(model) == []


@pytest.mark.slow
def test_efficientnet_lite0_keeps_its_outputs(lite0_onnx, photo_inputs):
    model = load_ir(lite0_onnx)
    equalized, info = equalize(model)
    assert info["pairs"] >= 30  # every Conv → ReLU6 → Conv of its MBConv blocks
    assert _same(model, equalized, photo_inputs[:8]) < 1e-5


@pytest.mark.slow
def test_activation_equalization_levels_the_depthwise_inputs(chain):
    """``equalize_activations``: the depthwise conv's input channels all reach the same observed range, and
    the function is kept; the pair into the pointwise conv (not depthwise) is left alone."""
    from trtforge.quantize.methods.equalize import _middle, channel_amax, equalize_activations

    model = copy_model(chain)
    rng = np.random.default_rng(3)
    batches = [{"x": rng.standard_normal((4, 3, 16, 16)).astype(np.float32)} for _ in range(4)]
    (pair,) = [p for p in find_pairs(model) if p.depthwise]
    before = channel_amax(model, [_middle(pair)], batches)[_middle(pair)]
    equalized, info = equalize_activations(model, batches)
    assert info["pairs"] == 1 and before.min() < 0.5 * before.max()  # uneven to start with
    after = channel_amax(equalized, [_middle(pair)], batches)[_middle(pair)]
    np.testing.assert_allclose(after, before.max(), rtol=1e-5)
    assert _same(model, equalized, batches[0]["x"]) < 1e-5


class HighBiasChain(torch.nn.Module):
    """Depthwise Conv → ReLU or ReLU6 → 1×1 Conv; half the channels carry a bias of ``high`` with small
    weights, so their pre-activation never reaches 0 (|W·x| stays below about 2)."""

    def __init__(self, high: float, relu6: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.c1 = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.c2 = torch.nn.Conv2d(8, 4, 1)
        self.relu6 = relu6
        with torch.no_grad():
            self.c1.weight.mul_(0.3)
            self.c1.bias[::2] = high

    def forward(self, x):
        h = self.c1(x)
        return self.c2(torch.nn.functional.relu6(h) if self.relu6 else torch.relu(h))


def _batches(seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((4, 8, 12, 12)).astype(np.float32)} for _ in range(4)]


@pytest.mark.slow
def test_high_biases_are_absorbed_into_the_next_conv(tmp_path):
    from trtforge.quantize.methods.equalize import absorb_biases, channel_range

    model = _onnx(HighBiasChain(5.0, relu6=False), (1, 8, 12, 12), tmp_path / "relu.onnx")
    batches = _batches(4)
    middle = next(n for n in model.graph if n.op_type == "Relu").outputs[0].name
    before = channel_range(model, [middle], batches)[middle]
    absorbed, info = absorb_biases(model, batches)
    assert info["pairs"] == 1 and info["channels"] >= 4  # the four high-bias channels at least
    after = channel_range(absorbed, [middle], batches)[middle]
    assert np.all(after[1][::2] < before[1][::2] - 2) and np.allclose(after[0][::2], 0, atol=1e-5)
    for batch in batches:  # the FP32 function is kept where it was measured
        assert _same(model, absorbed, batch["x"]) < 1e-5


@pytest.mark.slow
def test_a_relu6_that_clips_stops_absorption(tmp_path):
    """Channels whose pre-activation reaches 6 keep their bias (a shift would move the clip); forcing the
    ReLU rule on them changes the outputs, so the check below can fail."""
    from trtforge.quantize.methods.equalize import _absorb, absorb_biases, channel_range

    model = _onnx(HighBiasChain(5.5, relu6=True), (1, 8, 12, 12), tmp_path / "relu6.onnx")
    batches = _batches(5)
    (pair,) = find_pairs(model)
    low, high = channel_range(model, [pair.first.outputs[0].name], batches)[pair.first.outputs[0].name]
    assert np.all(high[::2] > 6) and np.all(low[::2] > 2)  # clipped at the top, far above 0
    absorbed, info = absorb_biases(model, batches)
    assert info["channels"] == 0 and not info["absorbed_layers"]
    assert _same(model, absorbed, batches[0]["x"]) < 1e-5
    forced = copy_model(model)
    (forced_pair,) = find_pairs(forced)
    _absorb(forced.graph, forced_pair, np.where(np.arange(8) % 2 == 0, low, 0.0))  # ignoring the clip
    assert _same(model, forced, batches[0]["x"]) > 1e-3


@pytest.mark.slow
def test_efficientnet_lite0_keeps_its_outputs_after_bias_absorption(lite0_onnx, photo_inputs):
    from trtforge.quantize.methods.equalize import absorb_biases

    model = load_ir(lite0_onnx)
    batches = [{"images": photo_inputs[i:i + 4]} for i in range(0, 16, 4)]
    absorbed, info = absorb_biases(model, batches)
    assert info["pairs"] >= 15  # each MBConv's depthwise → ReLU6 → 1×1 projection
    for batch in batches:
        assert _same(model, absorbed, batch["images"]) < 1e-5
