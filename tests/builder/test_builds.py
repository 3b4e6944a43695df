"""Real TensorRT-RTX builds through ``trtforge.compile`` (the acceptance builds of the foundation)."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
import torch

import trtforge
from trtforge.builder.build import build_engine
from trtforge.core import trt
from trtforge.core.config import CompileConfig
from trtforge.core.hashing import sha256_file
from trtforge.core.ort_session import session
from trtforge.core.preprocessing import PreprocessConfig
from trtforge.core.sidecar import read_sidecar

STATIC = {"min": [1, 3, 224, 224], "opt": [1, 3, 224, 224], "max": [1, 3, 224, 224]}
DYNAMIC = {"min": [1, 3, 224, 224], "opt": [8, 3, 224, 224], "max": [32, 3, 224, 224]}


@pytest.mark.parametrize(
    ("precision", "batch", "profile"),
    [("fp32", 1, STATIC), ("fp32", (1, 8, 32), DYNAMIC), ("fp16", 1, STATIC), ("fp16", (1, 8, 32), DYNAMIC)],
)
@pytest.mark.slow
def test_efficientnet_lite0_builds(lite0_onnx, tmp_path, precision, batch, profile):
    art = trtforge.compile(lite0_onnx, precision=precision, batch=batch, output_dir=tmp_path,
                           name="lite0", progress=False, preprocessing={"resize": [224, 224]})
    assert art.engine_path.name == f"lite0_{precision}.engine"
    assert art.sidecar_path.name == f"lite0_{precision}.json"
    assert art.onnx_path.name == f"lite0_{precision}.onnx"
    sc = read_sidecar(art.sidecar_path)
    assert sc.engine_size == art.engine_path.stat().st_size > 1_000_000
    assert sc.engine_sha256 == sha256_file(art.engine_path)
    assert sc.profiles == (({"images": profile}),)
    expected_batch = 1 if batch == 1 else -1
    assert [s.as_dict() for s in sc.inputs] == [{"name": "images", "dtype": "float32", "shape": [expected_batch, 3, 224, 224]}]
    assert [s.as_dict() for s in sc.outputs] == [{"name": "logits", "dtype": "float32", "shape": [expected_batch, 1000]}]
    assert sc.precision.built == precision
    low = "float16" if precision == "fp16" else "float32"
    assert sc.precision.node_dtypes[low] > 80
    assert sc.builder.flavour == trt.info().flavour
    assert sc.source.kind == "onnx" and sc.source.onnx_file == art.onnx_path.name
    assert sc.preprocessing == PreprocessConfig((224, 224))
    # The processed graph kept beside the engine is the one that was built, and it runs.
    processed = onnx.load(str(art.onnx_path))
    sess = session(processed.SerializeToString())
    out = sess.run(None, {"images": np.zeros((2, 3, 224, 224), np.float32)})[0]
    assert out.shape == (2, 1000) and out.dtype == np.float32


@pytest.mark.slow
def test_builds_are_deterministic(lite0_onnx):
    config = CompileConfig(precision="fp16", batch=(1, 4, 8))
    a = build_engine(lite0_onnx, config, name="lite0_fp16", progress=False).plan
    b = build_engine(lite0_onnx, config, name="lite0_fp16", progress=False).plan
    assert a == b


class EncoderBlock(torch.nn.Module):
    """A pre-norm transformer encoder block: LayerNorm + multi-head attention + MLP."""

    def __init__(self, dim: int = 64, heads: int = 4) -> None:
        super().__init__()
        self.layer = torch.nn.TransformerEncoderLayer(dim, heads, dim * 4, dropout=0.0, batch_first=True,
                                                      norm_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)


@pytest.mark.slow
def test_transformer_encoder_block_fp16(tmp_path):
    torch.manual_seed(0)
    model = EncoderBlock().eval()
    x = torch.randn(2, 16, 64)
    art = trtforge.compile(model, (x,), precision="fp16", batch=(1, 2, 8), output_dir=tmp_path, progress=False)
    sc = art.sidecar
    ops = {n.op_type for n in onnx.load(str(art.onnx_path)).graph.node}
    assert "LayerNormalization" in ops and "Softmax" in ops
    assert any("LayerNormalization" in reason for reason in sc.precision.fp32_nodes.values())
    out = session(art.onnx_path).run(None, {"x": x.numpy()})[0]
    with torch.no_grad():
        ref = model(x).numpy()
    assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < 1e-2
    assert sc.engine_size > 0 and sc.inputs[0].shape == (-1, 16, 64)


@pytest.mark.slow
def test_three_profile_engine(tmp_path):
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                                torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 4))
    art = trtforge.compile(model, (torch.randn(1, 3, 32, 32),), precision="fp16",
                           batch=[(1, 1, 1), (1, 8, 32), (32, 64, 128)], output_dir=tmp_path, name="tiny",
                           progress=False)
    data = json.loads(art.sidecar_path.read_text())
    assert [p["input"]["opt"][0] for p in data["profiles"]] == [1, 8, 64]
    assert [p["input"]["max"][0] for p in data["profiles"]] == [1, 32, 128]


@pytest.mark.slow
def test_multi_target_build(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU())
    art = trtforge.compile(model, (torch.randn(1, 16),), targets=["sm89", "sm86"], output_dir=tmp_path,
                           name="mlp", progress=False)
    assert art.sidecar.builder.targets == ("sm86", "sm89")
