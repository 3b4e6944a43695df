"""``trtforge selftest`` on this CPU machine: the real Lite0 FP16 build (TensorRT-RTX) through the cache,
the TensorRT route refused in one line (no GPU), the PyTorch and ONNX Runtime routes checked against the
FP32 reference, one JSON report; bad options refused before any work."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from trtforge.cli import app
from trtforge.debug.selftest import routes_to_run

pytestmark = pytest.mark.needs_trt


def test_the_routes_it_runs():
    assert routes_to_run("tensorrt", cuda=True) == ["tensorrt", "cuda_graph", "onnxruntime"]
    assert routes_to_run("tensorrt", cuda=False) == ["tensorrt", "eager", "onnxruntime"]
    assert routes_to_run("cuda_graph", cuda=True) == ["cuda_graph", "onnxruntime"]


@pytest.mark.parametrize(("args", "fragment"), [
    (["--json", "{tmp}"], "is a folder; name a file"),
    (["--json", "{tmp}/missing/report.json"], "does not exist; create it"),
    (["--route", "warp"], "--route warp: choose one of"),
    (["--samples", "0"], "need at least 1"),
])
def test_bad_options_are_one_line_before_any_work(tmp_path, args, fragment):
    result = CliRunner().invoke(app, ["selftest", *[a.format(tmp=tmp_path) for a in args]])
    assert result.exit_code == 2 and fragment in result.output, result.output
    assert "Traceback" not in result.output and "doctor" not in result.output.lower()  # refused before doctor ran


@pytest.mark.slow
def test_on_a_cpu_machine_no_engine_runs_and_the_rest_is_checked(tmp_path):
    """Lite0 FP16 at batch 1:8:32 through the run's engine store: the same request as ``trtforge demo``'s FP16 build,
    docs/selftest.md's and the classify tutorial's, so the run builds it once (the first of them to ask)."""
    if torch.cuda.is_available():
        pytest.skip("the CPU machine's behaviour")
    report_path = tmp_path / "selftest.json"
    result = CliRunner().invoke(app, ["selftest", "--json", str(report_path), "--samples", "4", "--repeats", "1",
                                      "-o", str(tmp_path / "out")], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "No engine can run here" in result.output
    report = json.loads(report_path.read_text())
    (engine,) = report["engines"]
    routes = {r["route"]: r for r in engine["routes"]}
    assert list(routes) == ["tensorrt", "eager", "onnxruntime"]
    assert not routes["tensorrt"]["ran"] and "cannot run here: no CUDA GPU" in routes["tensorrt"]["line"]
    assert "\n" not in routes["tensorrt"]["line"]
    for name in ("eager", "onnxruntime"):  # checked against the FP32 reference in ONNX Runtime
        r = routes[name]
        assert r["ran"] and r["passed"] and r["metric"] == "top1_agreement" and r["worst"] >= r["limit"]
        assert r["steady_ms"] > 0 and r["vs_baseline"] is None  # no cuda_graph baseline without a GPU
    assert engine["builder"]["flavour"] == "tensorrt_rtx" and engine["precision"] == "fp16"
    assert report["machine"]["cuda"] is False and report["machine"]["facts"]["python"]
    # A second run is a cache hit: the same engine bytes.
    again = CliRunner().invoke(app, ["selftest", "--json", str(report_path), "--samples", "2", "--repeats", "1",
                                     "--route", "onnxruntime"])
    assert again.exit_code == 0, again.output
    second = json.loads(report_path.read_text())["engines"][0]
    assert second["engine_sha256"] == engine["engine_sha256"]
    assert [r["route"] for r in second["routes"]] == ["onnxruntime", "eager"]


@pytest.mark.slow
def test_an_artifact_built_elsewhere_is_checked_instead_of_building(lite0_sidecar, tmp_path):
    """Where this machine's TensorRT refuses to build, a sidecar carried from another machine is checked."""
    report_path = tmp_path / "selftest.json"
    result = CliRunner().invoke(app, ["selftest", "--artifact", str(lite0_sidecar), "--route", "onnxruntime",
                                      "--samples", "2", "--repeats", "1", "--json", str(report_path)])
    assert result.exit_code == 0, result.output
    (engine,) = json.loads(report_path.read_text())["engines"]
    assert engine["sidecar"] == str(lite0_sidecar) and engine["precision"] == "fp16"
    expected = ["onnxruntime", "cuda_graph" if torch.cuda.is_available() else "eager"]
    assert [r["route"] for r in engine["routes"]] == expected and all(r["passed"] for r in engine["routes"])
    missing = CliRunner().invoke(app, ["selftest", "--artifact", str(tmp_path / "nope.json")])
    assert missing.exit_code == 2 and "nope.json" in missing.output and "Traceback" not in missing.output


def test_cuda_graph_asked_on_a_cpu_is_one_line_not_a_failure(tmp_path):
    """On a CPU the cuda_graph route would run plain FP16 torch and be judged as if it were the GPU route."""
    import torch

    from trtforge.debug.selftest import check_route

    if torch.cuda.is_available():
        pytest.skip("a GPU machine runs the route")
    result = check_route(tmp_path / "never_read.json", "cuda_graph", samples=4, repeats=1)
    assert not result.ran and "CUDA graphs need a CUDA GPU" in result.line and "--route fp16" in result.line
