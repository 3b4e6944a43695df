"""``trtforge tune`` (issue 38) on the CPU: a tiny network on the eager and onnxruntime routes (real TensorRT-RTX
builds through the run's engine cache, real ONNX Runtime and PyTorch runs, short timing windows), the Pareto front,
the constraints and the refusal naming the closest point, the resume (no build, no timing), the ``tuned`` record
and ``route="auto"``, bad input."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from cli_in_process import run
from tiny_model import EXAMPLE_SHAPE, TinyNet

import trtforge
from trtforge.core.device_identity import this_device
from trtforge.core.sidecar import read_sidecar, write_sidecar
from trtforge.runtime.load import resolve_route, route_refusal
from trtforge.tuning import ConstraintUnmet, Point, pareto_front, tune
from trtforge.tuning.base import needs_build
from trtforge.tuning.candidates import Candidate, DeviceFacts, TuneConfig, default_precisions, plan_sweep
from trtforge.tuning.pareto import choose

SWEEP = {"routes": ("eager", "onnxruntime", "tensorrt"), "precisions": ("fp32", "fp16"), "batches": (1, 2),
         "opt_levels": (0,), "warmup": 1, "repeats": 5, "max_minutes": 3, "progress": False}
POINT_KEYS = {"route", "precision", "batch", "opt_batch", "builder", "p50_ms", "p99_ms", "throughput", "accuracy",
              "pareto", "timed_with"}


def cache_files() -> set[str]:
    root = Path(os.environ["TRTFORGE_CACHE_DIR"])
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and p.suffix != ".lock"}


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """Two runs of the same sweep into one folder: the second must reuse every point."""
    folder = tmp_path_factory.mktemp("tune")
    torch.manual_seed(0)
    model = TinyNet().eval()
    data = folder / "data.npz"
    np.savez(data, x=np.random.default_rng(0).standard_normal((6, *EXAMPLE_SHAPE[1:])).astype(np.float32))
    out = folder / "tuned"
    first = tune(model, data, out, **SWEEP)
    cached = cache_files()
    second = tune(model, data, out, **SWEEP)
    return {"model": model, "data": data, "out": out, "first": first, "second": second, "cached": cached,
            "cached_after": cache_files()}


def test_the_sweep_measures_every_candidate_cheap_first_and_says_what_it_skipped(tuned):
    report = tuned["first"]
    assert trtforge.tune is tune  # the public verb, not the package (trtforge.tuning) its submodules load
    keys = [p.candidate.key for p in report.points]
    assert keys == ["eager/fp32/b1", "eager/fp32/b2", "onnxruntime/fp32/b1", "onnxruntime/fp32/b2",
                    "onnxruntime/fp16/b1", "onnxruntime/fp16/b2"]
    (skip,) = report.skipped
    assert skip.route == "tensorrt" and "no CUDA GPU" in skip.why
    assert report.builds + report.cache_hits == 2 and report.measured == 6 and report.reused == 0  # fp32, fp16
    for point in report.points:
        assert 0 < point.p50_ms <= point.p99_ms
        assert point.throughput == pytest.approx(point.candidate.batch * 1000 / point.p50_ms)
    by_key = dict(zip(keys, report.points, strict=True))
    assert by_key["eager/fp32/b1"].accuracy > 0.99999  # PyTorch FP32 against the ONNX Runtime FP32 reference
    assert 0.999 < by_key["onnxruntime/fp16/b1"].accuracy <= 1.0 + 1e-6


def test_json_plot_and_the_tuned_record_of_the_chosen_artifact(tuned):
    report = tuned["first"]
    data = report.as_json()
    assert all(set(p) == POINT_KEYS for p in data["points"]) and set(data["chosen"]) == POINT_KEYS
    assert data["chosen"] in data["points"] and data["chosen"]["pareto"] is True
    assert data["skipped"][0]["route"] == "tensorrt" and set(data["skipped"][0]) == {"route", "why"}
    chosen = report.chosen
    assert chosen.p99_ms == min(p.p99_ms for p in report.points)  # no bound: the lowest p99
    record = read_sidecar(report.artifact).tuned
    assert (record.route, record.precision, record.batch) == (chosen.candidate.route, chosen.candidate.precision,
                                                              chosen.candidate.batch)
    assert (record.device_kind, record.device) == (this_device().kind, this_device().name)
    assert record.measured["p99_ms"] == chosen.p99_ms and record.versions["trtforge"] == trtforge.__version__
    tuned_sidecars = [p for p in tuned["out"].glob("*.json") if '"tuned"' in p.read_text()]
    assert tuned_sidecars == [report.artifact]
    png = tuned["out"] / "tune.png"
    assert report.save_plot(png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_second_run_reuses_every_point_without_building_or_timing(tuned):
    first, second = tuned["first"], tuned["second"]
    assert (second.builds, second.measured, second.reused) == (0, 0, len(first.points))
    assert tuned["cached_after"] == tuned["cached"]  # nothing new in the engine cache
    assert [p.to_record() for p in second.points] == [p.to_record() for p in first.points]
    assert second.chosen == first.chosen


def test_the_budget_cuts_the_sweep_and_lists_what_it_left(tuned, tmp_path):
    out = shutil.copytree(tuned["out"], tmp_path / "tuned")
    report = tune(tuned["model"], tuned["data"], out, **{**SWEEP, "batches": (1, 2, 3), "max_minutes": 1e-9})
    assert report.reused == 6 and report.measured == 0  # batches 1 and 2 were measured before; 3 is new
    assert [c.key for c in report.left] == ["eager/fp32/b3", "onnxruntime/fp32/b3", "onnxruntime/fp16/b3"]
    cut = [s["why"] for s in report.as_json()["skipped"] if "budget" in s["why"]]
    assert cut == [f"{c.key}: the time budget ran out before it" for c in report.left]


class SlowNet(TinyNet):
    """TinyNet that takes a second a call: a candidate's cost is known (a stand-in for ``compiled``'s minutes)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(1.0)
        return super().forward(x)


def test_a_candidate_starts_only_if_the_time_left_covers_what_its_route_last_took(tmp_path):
    """eager b1 takes about 3 s (2 samples checked, 1 call timed) and ends about 5 s into a 7 s budget (before
    it: the output specs and the reference, a call each): b2 would overrun, so it is cut, and the line says why."""
    torch.manual_seed(0)
    data = tmp_path / "data.npz"
    np.savez(data, x=np.random.default_rng(0).standard_normal((2, *EXAMPLE_SHAPE[1:])).astype(np.float32))
    report = tune(SlowNet().eval(), data, tmp_path / "slow", routes=("eager",), batches=(1, 2), warmup=0,
                  repeats=1, max_minutes=7 / 60, progress=False)
    assert [p.candidate.key for p in report.points] == ["eager/fp32/b1"]
    (cut,) = report.left
    assert cut.key == "eager/fp32/b2"
    left_s, took_s = (float(n) for n in re.fullmatch(
        r"(\d+) s of the budget were left and the route's last candidate took (\d+) s", cut.why).groups())
    assert 0 <= left_s < took_s and took_s >= 3
    assert {"route": "eager", "why": f"eager/fp32/b2: {cut.why}"} in report.as_json()["skipped"]


def test_pytorch_routes_alone_build_nothing_and_judge_against_pytorch_fp32(tuned, tmp_path):
    """What runs on an H200, where TensorRT-RTX does not: no engine build, no ONNX; PyTorch FP32 is the reference."""
    report = tune(tuned["model"], tuned["data"], tmp_path / "torch", **{**SWEEP, "routes": ("eager",)})
    assert (report.builds, report.cache_hits, report.skipped) == (0, 0, ())
    assert [p.candidate.key for p in report.points] == ["eager/fp32/b1", "eager/fp32/b2"]
    assert all(p.accuracy > 0.99999 for p in report.points)
    assert report.artifact.name == "tiny_net_torch.json" and not list((tmp_path / "torch").glob("*.onnx"))
    with trtforge.load(report.artifact, route="auto", model=tuned["model"]) as engine:
        assert engine.route == "eager"


def test_the_plan_follows_the_capability_table_and_what_is_installed():
    bare_h200 = DeviceFacts("sm90", "", "")  # the lent H200: no TensorRT at all
    plan = plan_sweep(TuneConfig(batches=(1,)), bare_h200, has_model=True)
    assert [c.route for c in plan.candidates] == ["eager", "fp16", "cuda_graph", "compiled"]
    assert [s.route for s in plan.skipped] == ["tensorrt", "onnxruntime"] and not needs_build(plan, bare_h200)
    rtx_h200 = DeviceFacts("sm90", "tensorrt_rtx", "1.7.1")
    plan = plan_sweep(TuneConfig(routes=("eager", "tensorrt"), batches=(1,)), rtx_h200, has_model=True)
    assert "TensorRT-RTX 1.7.1 does not run on sm90" in plan.skipped[0].why and needs_build(plan, rtx_h200)
    ada = DeviceFacts("sm89", "tensorrt_rtx", "1.7.1")
    plan = plan_sweep(TuneConfig(routes=("tensorrt",), precisions=("fp16", "int8"), batches=(1, 8),
                                 opt_levels=(3, 5)), ada, has_model=False)
    assert {(c.precision, c.opt_level, c.opt_batch, c.batch) for c in plan.candidates} == {
        ("fp16", level, opt, b) for level in (3, 5) for opt in (1, 8) for b in (1, 8)}
    assert "does not accelerate int8 on sm89" in plan.skipped[0].why  # TensorRT-RTX: no W8A8 INT8 kernels
    assert default_precisions(ada) == ("fp32", "fp16", "bf16")


def test_the_pareto_front_on_hand_made_points():
    def point(p99: float, throughput: float, accuracy: float, batch: int = 1) -> Point:
        return Point(Candidate("eager", "fp32", batch), p99 / 2, p99, throughput, accuracy)

    fast, wide, exact, beaten, twin = (point(1, 100, 0.98), point(5, 900, 0.98), point(3, 300, 1.0),
                                       point(4, 250, 0.97), point(1, 100, 0.98, batch=2))
    assert pareto_front([fast, wide, exact, beaten, twin]) == (True, True, True, False, True)
    assert pareto_front([beaten, point(4, 250, 0.98)]) == (False, True)  # better accuracy alone dominates
    assert choose([fast, wide, exact]) is fast
    assert choose([fast, wide, exact], min_accuracy=0.99) is exact
    assert choose([fast, wide, exact], max_p99_ms=6, objective="throughput") is wide
    with pytest.raises(ConstraintUnmet, match=r"no point of 3 meets p99 ≤ 2 ms and accuracy ≥ 0.99; the closest is "
                                              r"eager fp32 batch 1: p99 1 ms"):  # 1 % short of the accuracy: nearer than 50 % late
        choose([fast, wide, exact], max_p99_ms=2, min_accuracy=0.99)


def test_constraints_on_measured_points_and_the_refusal_naming_the_closest(tuned, tmp_path):
    points = tuned["first"].points
    fastest = max(points, key=lambda p: p.throughput)
    out = shutil.copytree(tuned["out"], tmp_path / "tuned")  # its points file: the runs below measure nothing
    loose = tune(tuned["model"], tuned["data"], out, **SWEEP, max_p99_ms=1e3, min_accuracy=0.5)
    assert loose.chosen == fastest and loose.measured == 0  # under a latency bound: the highest throughput
    with pytest.raises(ConstraintUnmet, match="the closest is") as refused:
        tune(tuned["model"], tuned["data"], out, **SWEEP, max_p99_ms=1e-6)
    closest = min(points, key=lambda p: p.p99_ms)
    assert closest.line() in str(refused.value) and "\n" not in str(refused.value)


def test_route_auto_uses_the_record_of_this_device_and_falls_back_otherwise(tuned, tmp_path, caplog):
    report = tuned["first"]
    folder = tmp_path / "copy"
    shutil.copytree(tuned["out"], folder)
    sidecar = read_sidecar(folder / report.artifact.name)
    assert resolve_route(sidecar, "auto") == report.chosen.candidate.route
    with trtforge.load(sidecar.path, route="auto", model=tuned["model"]) as engine:
        assert engine.route == report.chosen.candidate.route
    elsewhere = replace(sidecar.tuned, device="NVIDIA H200", device_kind="gpu", driver="12.8")
    write_sidecar(sidecar.path, replace(sidecar, tuned=elsewhere))
    untuned = next(p for p in folder.glob("tiny_net_*.json") if p != sidecar.path)
    caplog.set_level(logging.WARNING, logger="trtforge")
    for path, why in ((sidecar.path, "was tuned on GPU NVIDIA H200, not on this CPU"), (untuned, "has no tuned record")):
        caplog.clear()
        with trtforge.load(path, route="auto") as engine:
            assert engine.route == "onnxruntime"  # the stated default without a GPU
        (line,) = [r.getMessage() for r in caplog.records if "route='auto'" in r.getMessage()]
        assert why in line and "using the default route onnxruntime" in line
    assert route_refusal(read_sidecar(untuned), "auto") is None
    from trtforge.serve.backend import open_engine

    with open_engine(untuned, "auto", {}) as served:  # serve --route auto: the same resolution, per artifact
        assert served.route == "onnxruntime"


def test_the_cli_prints_the_table_writes_json_and_refuses_an_unmet_bound(tiny_onnx, tmp_path):
    np.savez(tmp_path / "data.npz", x=np.random.default_rng(1).standard_normal((4, 3, 16, 16)).astype(np.float32))
    base = ["tune", tiny_onnx, "--data", tmp_path / "data.npz", "-o", tmp_path / "out", "--route", "onnxruntime",
            "--precision", "fp32", "--batch", "1", "--opt-level", "0", "--repeats", "3", "--warmup", "1", "-q"]
    done = run([*base, "--json", tmp_path / "tune.json"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "onnxruntime" in done.stdout and "* chosen" in done.stdout and "tuned record written" in done.stdout
    written = json.loads((tmp_path / "tune.json").read_text())
    assert [p["route"] for p in written["points"]] == ["onnxruntime"] and (tmp_path / "out" / "tune.png").is_file()
    refused = run([*base, "--max-p99-ms", "0.000001"])
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert refused.stderr.startswith("error: no point of 1 meets p99 ≤ 1e-06 ms; the closest is onnxruntime fp32 batch 1")


@pytest.mark.parametrize(("args", "message"), [
    (["--route", "warp"], "error: --route warp: unknown route; choose from tensorrt"),
    (["--precision", "fp12"], "error: --precision fp12: unknown precision; choose from fp32"),
    (["--max-minutes", "0"], "error: --max-minutes 0.0: the time budget must be above 0"),
    (["--min-accuracy", "2"], "error: --min-accuracy 2.0: accuracy is the top-1 agreement or cosine"),
    (["--data", "{wrong_name}"], "error: --data holds ['y'], the model takes ['x']"),
    (["--data", "{wrong_shape}"], "error: --data array 'x' has samples shaped (3, 8, 8), the model's input 'x' takes"),
], ids=["route", "precision", "budget", "accuracy", "data-names", "data-shape"])
def test_bad_input_is_one_line_before_any_work(tiny_onnx, tmp_path, args, message):
    np.savez(tmp_path / "right.npz", x=np.zeros((2, 3, 16, 16), np.float32))
    np.savez(tmp_path / "wrong_name.npz", y=np.zeros((2, 3, 16, 16), np.float32))
    np.savez(tmp_path / "wrong_shape.npz", x=np.zeros((2, 3, 8, 8), np.float32))
    args = [a.format(wrong_name=tmp_path / "wrong_name.npz", wrong_shape=tmp_path / "wrong_shape.npz") for a in args]
    data = [] if "--data" in args else ["--data", tmp_path / "right.npz"]
    done = run(["tune", tiny_onnx, *data, "-o", tmp_path / "out", *args])
    assert done.returncode == 2 and done.stderr.startswith(message) and done.stderr.count("\n") == 1, done.stderr
    assert not (tmp_path / "out").exists()  # refused before any work
