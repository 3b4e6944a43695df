"""End to end: `trtforge build --precision int8`, `trtforge quantize sensitivity`, the calibration
cache, and measured (auto) placement on the real EfficientNet-Lite0."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from PIL import Image
from typer.testing import CliRunner

from trtforge.cli import app
from trtforge.core.budget import ErrorBudget
from trtforge.core.config import QuantConfig
from trtforge.core.sidecar import read_sidecar
from trtforge.quantize.quantizer import quantize_model
from trtforge.zoo.efficientnet_lite import LITE0_PREPROCESSING


@pytest.fixture(scope="module")
def image_dir(tmp_path_factory):
    from trtforge.zoo.photos import photo_crops

    folder = tmp_path_factory.mktemp("calib_images")
    for i, crop in enumerate(photo_crops(10, size=256, seed=5)):
        Image.fromarray(crop).save(folder / f"img_{i:03d}.png")
    (folder / "pp.json").write_text(json.dumps({"preprocessing": LITE0_PREPROCESSING}))
    return folder


@pytest.mark.slow
def test_cli_build_int8_writes_quantization_block(lite0_onnx, image_dir, tmp_path):
    out = tmp_path / "out"
    result = CliRunner().invoke(app, [
        "build", str(lite0_onnx), "--precision", "int8", "--calib", str(image_dir), "--calibrator", "percentile",
        "--preprocessing", str(image_dir / "pp.json"), "--exclude", r"_blocks\.15\.", "-o", str(out), "--quiet",
        "--allow-unaccelerated",  # TensorRT-RTX runs no W8A8 INT8: this tests the INT8 machinery, not its speed
    ])
    assert result.exit_code == 0, result.output
    sidecar = read_sidecar(next(out.glob("*int8*.json")))
    assert sidecar.target_plan.layers and sidecar.target_plan.unaccelerated
    q = sidecar.quantization
    assert q.calibrator == "percentile" and q.samples == {"calibration": 8, "held_back": 2}
    assert any("excluded by pattern" in e["reason"] for e in q.excluded_layers)
    assert 0 < q.coverage < 1 and "rel_l2_mean" in q.measured
    assert q.task == "classification" and q.error_budget["limits"][0]["metric"] == "softmax_kl"
    assert list((out / "calib_cache").glob("calib_*.json"))


@pytest.mark.slow
def test_cli_sensitivity_prints_ranked_table(lite0_onnx, image_dir):
    result = CliRunner().invoke(app, [
        "quantize", "sensitivity", str(lite0_onnx), "--data", str(image_dir),
        "--preprocessing", str(image_dir / "pp.json"), "--top", "5",
    ])
    assert result.exit_code == 0, result.output
    assert "INT8 sensitivity" in result.output and "rel. L2" in result.output
    assert "_blocks" in result.output or "_conv" in result.output


def test_cli_bad_calibration_data_is_one_clear_line(lite0_onnx, tmp_path):
    np.save(tmp_path / "raw.npy", np.zeros((16, 3, 224, 224), np.uint8))
    result = CliRunner().invoke(app, ["quantize", "sensitivity", str(lite0_onnx), "--data", str(tmp_path / "raw.npy")])
    assert result.exit_code == 2 and "raw pixels" in result.output


@pytest.mark.slow
def test_calibration_cache_hit_and_miss(lite0_onnx, photo_inputs, tmp_path):
    proto = onnx.load(str(lite0_onnx))
    x = photo_inputs[:5]  # one batch of 4 calibrates, 1 held back (was 10 in batches of 8: twice the calibration)
    cfg = QuantConfig(cache_dir=tmp_path, bias_correction=False, batch_size=4)
    first = quantize_model(proto, x, cfg, progress=False)
    second = quantize_model(proto, x, cfg, progress=False)
    assert (first.report["cache"], second.report["cache"]) == ("miss", "hit")
    assert first.plan == second.plan  # same scales, same layers
    entry = json.loads(next(tmp_path.glob("calib_*.json")).read_text())
    assert entry["graph_sha256"] == first.report["graph_sha256"] and entry["settings"]["calibrator"] == "mse"
    # Other settings or other data: a miss, and a second entry.
    other = QuantConfig(cache_dir=tmp_path, calibrator="max", bias_correction=False, batch_size=4)
    assert quantize_model(proto, x, other, progress=False).report["cache"] == "miss"
    assert quantize_model(proto, photo_inputs[5:10], cfg, progress=False).report["cache"] == "miss"
    assert len(list(tmp_path.glob("calib_*.json"))) == 3


@pytest.mark.slow
def test_auto_placement_meets_budget(lite0_onnx, photo_inputs):
    proto = onnx.load(str(lite0_onnx))
    # An explicit relative-L2 budget (a float would be a softmax-KL limit for this classifier).
    budget = ErrorBudget.of(rel_l2=0.08)
    # 15 photos: 12 calibrate, 3 held back (40 cost 21 CPU s against 13 for 20 and kept 4 groups in FP16 against 6;
    # 20 cost 19.6 CPU s against 15.2 for 15, which keeps 7 groups, measures 0.071 and checks 14 plans, not 16).
    result = quantize_model(proto, photo_inputs[:15], QuantConfig(placement="auto", error_budget=budget,
                                                                   bias_correction=False), progress=False)
    rep = result.report
    assert rep["measured"]["rel_l2_mean"] <= 0.08  # measured on the same held-back samples auto used
    assert rep["error_budget"]["limits"][0]["metric"] == "rel_l2" and rep["error_budget"]["holds"]
    ranking = rep["sensitivity"]
    assert len(ranking) == 50 and all("rel_l2" in r for r in ranking)
    kept_fp16 = [r for r in ranking if r["fp16"]]
    assert kept_fp16  # INT8 everywhere misses this budget: the bisection moved groups
    assert len(result.plan.excluded) == sum(len(r["layers"]) for r in kept_fp16)
    assert rep["coverage"] > 0.5
