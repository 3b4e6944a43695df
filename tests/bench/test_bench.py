"""The route benchmark: timing statistics, and `trtforge bench` end to end on the CPU."""

from __future__ import annotations

import json
import time

import pytest
import torch
from typer.testing import CliRunner

from trtforge.cli import app
from trtforge.measure.timing import LatencyStats, measure


def test_percentiles_and_throughput_from_worked_samples():
    stats = LatencyStats.from_samples([float(v) for v in range(1, 101)], batch=8, clock="perf_counter")
    assert stats.median_ms == 50.5 and stats.min_ms == 1.0
    assert abs(stats.p90_ms - 90.1) < 1e-9 and abs(stats.p99_ms - 99.01) < 1e-9
    assert abs(stats.throughput - 8 * 1000 / 50.5) < 1e-9


def test_measure_times_real_work_on_the_cpu():
    stats = measure(lambda: time.sleep(0.002), torch.device("cpu"), warmup=1, repeats=5)
    assert stats.clock == "perf_counter" and stats.repeats == 5
    assert 2.0 <= stats.median_ms < 50.0


@pytest.mark.slow  # EfficientNet-Lite0 on every route, timed
def test_bench_command_writes_rows_and_checks(lite0_sidecar, tmp_path):
    out = tmp_path / "bench.json"
    result = CliRunner().invoke(app, ["bench", str(lite0_sidecar), "--route", "onnxruntime", "--route", "eager",
                                      "--batch", "2", "--warmup", "0", "--repeats", "2", "--json", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    kinds = {(r["route"], r["kind"]) for r in data["rows"]}
    assert kinds == {(route, kind) for route in ("onnxruntime", "eager")
                     for kind in ("model", "end_to_end", "end_to_end_pinned")}
    assert all(c["ok"] for c in data["checks"]) and data["machine"]["torch"] == torch.__version__
    assert "compile-pool start-up" in data["config"]["warmup_note"]  # the JSON says how it warmed up
    assert {r["compile_pool"] for r in data["rows"] if r["kind"] != "model"} == {"no compile-worker pool was running"}


@pytest.mark.slow
def test_bench_command_refuses_unknown_route(lite0_sidecar):
    result = CliRunner().invoke(app, ["bench", str(lite0_sidecar), "--route", "tensorflow"])
    assert result.exit_code == 2 and "unknown route" in result.output


@pytest.mark.slow  # torch.compile of the preprocessing and the Lite0 predictor (minutes on a CPU)
@pytest.mark.parametrize(("flag", "on_cuda_graph"), [
    (["--compile-preprocessing"], True),
    ([], False),  # the default: fused only where the predictor captures CUDA graphs (here: a CPU)
])
def test_bench_compile_preprocessing_reaches_the_cuda_graph_predictor(lite0_sidecar, tmp_path, flag, on_cuda_graph):
    out = tmp_path / "bench.json"
    result = CliRunner().invoke(app, ["bench", str(lite0_sidecar), "--route", "eager", "--route", "cuda_graph",
                                      "--batch", "1", "--warmup", "0", "--repeats", "1", *flag,
                                      "--json", str(out)])
    assert result.exit_code == 0, result.output
    rows = json.loads(out.read_text())["rows"]
    fused = {(r["route"], r["kind"]): r.get("compile_preprocessing") for r in rows}
    assert fused[("cuda_graph", "end_to_end")] is on_cuda_graph and fused[("eager", "end_to_end")] is False
    assert fused[("cuda_graph", "model")] is None  # a model-only row has no predictor


@pytest.mark.slow
def test_zoo_sidecar_loads_on_the_pytorch_routes_and_matches_the_zoo_model(tmp_path):
    import trtforge
    from trtforge.measure.routes import example_input, write_zoo_sidecar, zoo_bench_model
    from trtforge.zoo import efficientnet_lite0

    path = write_zoo_sidecar(tmp_path, "efficientnet_lite0")
    with trtforge.load(path, route="eager", device="cpu") as engine:
        assert [s.name for s in engine.outputs] == ["logits"] and engine.inputs[0].shape == (-1, 3, 224, 224)
        x = example_input(engine.inputs[0], 2, "cpu")
        with torch.inference_mode():
            torch.testing.assert_close(engine(x)["logits"], efficientnet_lite0()(x), rtol=1e-5, atol=1e-5)
        assert engine.sidecar.preprocessing.size == (224, 224)
    with pytest.raises(ValueError, match="unknown zoo model 'yolo'"):
        zoo_bench_model("yolo")
