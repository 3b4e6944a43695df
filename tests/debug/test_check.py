"""``trtforge check``: the TensorRT route through the double, the ONNX Runtime and PyTorch routes for real."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
from debug_models import double_artifact, timed_double
from trt_double import FAKE_TRT
from typer.testing import CliRunner

import trtforge
from trtforge.cli import app
from trtforge.core import trt
from trtforge.core.sidecar import read_sidecar
from trtforge.debug.check import check_artifact
from trtforge.debug.doctor import artifact_verdict, gather_facts
from trtforge.debug.speedup import fp16_baseline
from trtforge.debug.tolerances import TOLERANCES, judge
from trtforge.measure.inputs import save_npz

runner = CliRunner()


def test_tensorrt_route_through_the_double_agrees_with_onnx_runtime(fake_trt, fake_artifact):
    report = check_artifact(fake_artifact, route="tensorrt", device="cpu", samples=12, repeats=2, bindings=fake_trt.bindings)
    assert report.passed, report.judgement.failures
    (out,) = report.judgement.outputs
    assert out.name == "logits" and out.rel_l2 < 1e-6 and out.max_abs < 1e-5
    assert report.judgement.task == "other" and report.judgement.metric == "rel_l2"
    assert report.samples == 12 and report.batch == 4  # the profile's opt batch; 4 + 4 + 4
    assert report.timing.first_call_ms > 0 and report.timing.steady_ms > 0 and report.timing.memory_mib > 0
    # TensorRT-RTX: a second load found the JIT runtime cache the first one stored; full TensorRT has none.
    cached = report.timing.first_call_cached_ms
    assert (cached > 0) if fake_trt.rtx else cached is None


def test_a_wrong_engine_fails_and_points_at_layerwise_compare(fake_trt, tmp_path):
    # The reference computes ReduceMax; the "engine" a mean: every sample differs.
    artifact = double_artifact(tmp_path, reference_op="ReduceMax")
    report = check_artifact(artifact, route="tensorrt", device="cpu", samples=8, repeats=1, bindings=fake_trt.bindings)
    assert not report.passed
    assert report.judgement.failures[0].startswith("logits: rel_l2 ")
    assert "trtforge compare --layerwise" in report.hint and "fake_reference_fp32.onnx" in report.hint


def test_inputs_from_an_npz_are_used_as_given(fake_trt, fake_artifact, tmp_path):
    x = np.full((3, 3, 8, 8), 2.0, np.float32)
    path = save_npz(tmp_path / "in.npz", {"images": x})
    report = check_artifact(fake_artifact, route="tensorrt", device="cpu", inputs=path, repeats=1, bindings=fake_trt.bindings)
    assert report.samples == 3 and report.passed
    bad = save_npz(tmp_path / "bad.npz", {"pixels": x})
    with pytest.raises(ValueError, match=r"holds \['pixels'\], the model takes \['images'\]"):
        check_artifact(fake_artifact, route="tensorrt", device="cpu", inputs=bad, bindings=fake_trt.bindings)


@pytest.mark.slow
def test_check_command_eager_and_onnxruntime_routes_on_lite0(lite0_sidecar):
    for route in ("eager", "onnxruntime"):
        result = runner.invoke(app, ["check", str(lite0_sidecar), "--route", route, "--samples", "4", "--repeats", "1"])
        assert result.exit_code == 0, result.output
        assert "PASS: top1_agreement" in result.output and "classification" in result.output
        assert "first call" in result.output and "steady state" in result.output


def test_check_command_fails_with_exit_1_and_the_next_step(tmp_path):
    # The processed graph (what the onnxruntime route checks) computes a mean, the reference a max.
    artifact = double_artifact(tmp_path, reference_op="ReduceMax", processed_op="ReduceMean")
    result = runner.invoke(app, ["check", str(artifact), "--route", "onnxruntime", "--samples", "4", "--repeats", "1"])
    assert result.exit_code == 1, result.output
    assert "FAIL: logits: rel_l2" in result.output
    assert "next: find where it diverges: trtforge compare --layerwise" in result.output
    assert "fake_fp32.onnx" in result.output
    same = runner.invoke(app, ["check", str(double_artifact(tmp_path / "same")), "--route", "onnxruntime",
                               "--samples", "4", "--repeats", "1"])
    assert same.exit_code == 0, same.output


def test_tensorrt_route_without_a_usable_gpu_is_one_line(lite0_sidecar):
    from trtforge.core.sidecar import read_sidecar

    verdict = artifact_verdict(gather_facts(), read_sidecar(lite0_sidecar).builder)
    if verdict.runs:
        pytest.skip("this machine can run the engine")
    result = runner.invoke(app, ["check", str(lite0_sidecar), "--route", "tensorrt"])
    assert result.exit_code == 1
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: --route tensorrt: efficientnet_lite0_fp16 cannot run here")
    assert "Traceback" not in result.output


def test_tolerances_follow_precision_and_task():
    ref = {"logits": np.array([[1.0, 2.0, 3.0], [3.0, 2.0, 1.0]] * 5)}
    flipped = {"logits": ref["logits"][:, ::-1].copy()}
    assert judge(ref, ref, task="classification", precision="fp16").passed
    failed = judge(ref, flipped, task="classification", precision="fp16")
    assert not failed.passed and failed.failures == ("logits: top1_agreement 0, needs ≥ 0.97",)
    noisy = {"logits": ref["logits"] * (1 + 1e-2)}
    assert judge(ref, noisy, precision="fp16").passed and not judge(ref, noisy, precision="fp32").passed
    assert TOLERANCES["fp32"]["rel_l2"] < TOLERANCES["fp16"]["rel_l2"] < TOLERANCES["int8"]["rel_l2"]


@pytest.mark.parametrize(("engine_ms", "fp16_ms", "verdict"), [(40, 160, "it pays off here"),
                                                                (160, 40, "a slow-down: FP16 is faster here")])
@pytest.mark.slow
def test_a_quantized_engine_is_timed_against_its_fp16_build(tmp_path, engine_ms, fp16_ms, verdict):
    """The double's engines take their recorded times: the speed-up is their ratio, in the report and the CLI."""
    quantized = timed_double(tmp_path, "int8", engine_ms)
    fp16 = timed_double(tmp_path, "fp16", fp16_ms)
    report = check_artifact(quantized, route="tensorrt", device="cpu", samples=4, repeats=5, bindings=FAKE_TRT)
    speedup = report.speedup
    assert speedup.baseline == str(fp16) and not speedup.built
    # The recorded 4× (or ¼×), diluted by the route's own per-call cost on this shared CPU machine.
    if fp16_ms > engine_ms:
        assert 1.5 < speedup.ratio < 4.4 and speedup.pays_off
    else:
        assert 1 / 4.4 < speedup.ratio < 1 / 1.5 and not speedup.pays_off
    assert speedup.line.startswith(f"int8 engine: {speedup.ratio:.2f}× the speed of its FP16 build") and verdict in speedup.line
    assert check_artifact(fp16, route="tensorrt", device="cpu", samples=4, repeats=2, bindings=FAKE_TRT).speedup is None
    assert check_artifact(quantized, route="tensorrt", device="cpu", samples=4, repeats=2, bindings=FAKE_TRT,
                          compare_fp16=False).speedup is None


@pytest.mark.skipif(not trt.available() or not trt.info().is_rtx, reason="needs TensorRT-RTX")
def test_an_absent_fp16_engine_is_built_on_the_fly_through_the_engine_cache(tiny_onnx, tmp_path):
    art = trtforge.compile(tiny_onnx, precision="fp32", targets=["sm89"], batch="1:2:4", output_dir=tmp_path / "out",
                           progress=False, cache_dir=tmp_path / "cache")
    sidecar = read_sidecar(art.sidecar_path)
    hits = []
    for _ in range(2):
        with contextlib.ExitStack() as stack:
            path, built = fp16_baseline(sidecar, stack)
            fp16 = read_sidecar(path)
            assert built and path.parent != art.sidecar_path.parent  # nothing written beside the user's engine
            assert fp16.precision.built == "fp16" and fp16.builder.targets == ("sm89",)
            assert fp16.profiles == sidecar.profiles
            hits.append(fp16.builder.cache["hit"])
    assert hits == [False, True]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(
        [art.engine_path.name, art.sidecar_path.name, art.onnx_path.name, art.reference_onnx_path.name])


def test_every_precision_has_tolerances_and_a_layer_threshold():
    """An fp8 artifact once got "precision 'fp8' has no tolerances" from check and compare (the matrix's FP8 cells)."""
    from trtforge.core.config import PRECISIONS
    from trtforge.debug.layerwise import LAYER_THRESHOLDS

    assert set(TOLERANCES) == set(PRECISIONS) == set(LAYER_THRESHOLDS)
    for precision in PRECISIONS:
        assert TOLERANCES["fp32"]["rel_l2"] <= TOLERANCES[precision]["rel_l2"] < 1
        assert 0.5 < TOLERANCES[precision]["cosine"] <= TOLERANCES["fp32"]["cosine"]
