"""SmoothQuant folds into LayerNorm and Linear weights: FP32 outputs unchanged, no node added."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import pytest
import torch

from trtforge.capture.export import export_onnx
from trtforge.core.config import QuantConfig
from trtforge.passes.cleanup import cleanup
from trtforge.passes.graph import load_ir, to_proto
from trtforge.quantize.data import batches
from trtforge.quantize.methods.smoothquant import find_sites, smooth, smoothing_factors
from trtforge.quantize.quantizer import quantize_model
from trtforge.quantize.report import per_sample_errors, run_model


class PreNormBlock(torch.nn.Module):
    """Pre-LN transformer block (timm ViT style): each LayerNorm feeds only Linear layers."""

    def __init__(self, dim: int = 64, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = torch.nn.LayerNorm(dim)
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)
        self.norm2 = torch.nn.LayerNorm(dim)
        self.fc1 = torch.nn.Linear(dim, 4 * dim)
        self.fc2 = torch.nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        qkv = self.qkv(self.norm1(x)).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = torch.nn.functional.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2])
        x = x + self.proj(a.transpose(1, 2).reshape(b, n, d))
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.norm2(x))))


@pytest.fixture(scope="module")
def block_onnx(tmp_path_factory):
    torch.manual_seed(0)
    block = PreNormBlock().eval()
    with torch.no_grad():  # activation outliers in a few channels, as in real transformers
        block.norm1.weight[[3, 17]] = 25.0
        block.norm2.weight[[5]] = 30.0
        block.norm2.bias[[7]] = 12.0
    path = export_onnx(block, (torch.randn(2, 16, 64),), tmp_path_factory.mktemp("sq") / "block.onnx")
    return to_proto(cleanup(load_ir(path)))


@pytest.fixture(scope="module")
def feeds():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(48, 16, 64)).astype(np.float32)
    return [{"x": x[i : i + 1]} for i in range(48)]


def test_factors_formula():
    s = smoothing_factors(np.array([4.0, 1.0, 0.0]), np.array([1.0, 4.0, 2.0]), alpha=0.5)
    np.testing.assert_allclose(s, [2.0, 0.5, 1.0])


@pytest.mark.slow
def test_smoothquant_keeps_fp32_outputs(block_onnx, feeds):
    name = block_onnx.graph.input[0].name
    data = [{name: f["x"]} for f in feeds]
    sites, _ = find_sites(block_onnx)
    assert len(sites) == 2  # norm1 → qkv projection, norm2 → fc1
    smoothed_ir, info = smooth(block_onnx, batches(data[:32], 8), alpha=0.5)
    smoothed = to_proto(smoothed_ir)
    assert [s["consumers"] for s in info["sites"]] and max(s["s_max"] for s in info["sites"]) > 2.0
    assert Counter(n.op_type for n in smoothed.graph.node) == Counter(n.op_type for n in block_onnx.graph.node)
    held = batches(data[32:], 8)
    rel, _ = per_sample_errors(run_model(block_onnx, held), run_model(smoothed, held))
    assert rel.max() <= 1e-5
    # Something really moved: the LayerNorm scales changed.
    before = {t.name: onnx.numpy_helper.to_array(t) for t in block_onnx.graph.initializer}
    after = {t.name: onnx.numpy_helper.to_array(t) for t in smoothed.graph.initializer}
    ln_scale = sites[0][0].inputs[1].name
    assert not np.allclose(before[ln_scale], after[ln_scale])


def test_smoothquant_helps_int8_on_outlier_channels(block_onnx, feeds):
    name = block_onnx.graph.input[0].name
    data = [{name: f["x"]} for f in feeds]
    plain = quantize_model(block_onnx, data, QuantConfig(calibrator="max"), progress=False)
    smoothed = quantize_model(block_onnx, data, QuantConfig(calibrator="max", smoothquant=0.5), progress=False)
    assert smoothed.report["smoothquant"]["sites"]
    assert smoothed.report["measured"]["rel_l2_mean"] < plain.report["measured"]["rel_l2_mean"]


@pytest.mark.slow  # the MiniLM encoder's ONNX export (session fixture)
def test_post_ln_bert_is_skipped_with_reason(minilm_onnx):
    proto = onnx.load(str(minilm_onnx))
    sites, skipped = find_sites(proto)
    assert not sites and skipped
    assert all("folding would change it" in s["reason"] for s in skipped)
