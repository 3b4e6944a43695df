"""The route benchmark: timing statistics, and `trtforge bench` end to end on the CPU."""

from __future__ import annotations

import json
import time

import numpy as np
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


# --- bench on a sidecar: every input fed, the FP32 reference, the batches the artifact takes --------------------


def _tiny_graphs(folder):
    """Two tiny graphs with a static batch of 1: ``ids_mask`` (int64 ids and a bool mask: Gather, Cast, Mul; a random
    float table, which FP16 rounds) and ``no_input`` (a Constant through a Relu)."""
    import onnx
    from onnx import TensorProto, numpy_helper
    from onnx import helper as oh

    table = numpy_helper.from_array(np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32), "table")
    axis = numpy_helper.from_array(np.array([2], np.int64), "axis")
    nodes = [oh.make_node("Gather", ["table", "ids"], ["emb"]), oh.make_node("Cast", ["mask"], ["maskf"], to=1),
             oh.make_node("Unsqueeze", ["maskf", "axis"], ["mask3"]), oh.make_node("Mul", ["emb", "mask3"], ["y"])]
    graph = oh.make_graph(nodes, "ids_mask", [oh.make_tensor_value_info("ids", TensorProto.INT64, [1, 6]),
                                              oh.make_tensor_value_info("mask", TensorProto.BOOL, [1, 6])],
                          [oh.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, 4])], [table, axis])
    onnx.save(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)]), folder / "ids_mask.onnx")
    const = numpy_helper.from_array(np.array([[-1.5, -0.5, 0.5, 1.5]], np.float32), "c")
    graph = oh.make_graph([oh.make_node("Constant", [], ["c"], value=const), oh.make_node("Relu", ["c"], ["y"])],
                          "no_input", [], [oh.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    onnx.save(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)]), folder / "no_input.onnx")


@pytest.fixture(scope="module")
def tiny_artifacts(tmp_path_factory):
    """``ids_mask_fp16.json`` and ``no_input_fp16.json``: both graphs built at FP16 by the CLI (the real builder,
    ``--opt-level 0``, through the run's engine cache), once for this module."""
    from cli_in_process import run

    folder = tmp_path_factory.mktemp("bench_tiny")
    _tiny_graphs(folder)
    for name in ("ids_mask", "no_input"):
        done = run(["build", folder / f"{name}.onnx", "--precision", "fp16", "--opt-level", "0",
                    "-o", folder / "out", "-q"])
        assert done.returncode == 0, done.stderr
    return {name: folder / "out" / f"{name}_fp16.json" for name in ("ids_mask", "no_input")}


BENCH_CPU = ["--route", "onnxruntime", "--device", "cpu", "--warmup", "1", "--repeats", "3"]


def test_bench_feeds_every_input_and_checks_the_fp16_graph_against_fp32(tiny_artifacts, tmp_path):
    """An int64 and a bool input are both made and fed (only the first was, a float one); the check's reference is
    the FP32 reference graph, the candidate the artifact's FP16 graph: a small error that is not 0.0 (both sides
    ran one graph, so it always read 0.0), and exactly the error of those two graphs on the same made inputs."""
    from cli_in_process import run

    artifact, out = tiny_artifacts["ids_mask"], tmp_path / "bench.json"
    done = run(["bench", artifact, *BENCH_CPU, "--json", out])
    assert done.returncode == 0, done.stderr
    from trtforge.core.ort_session import session
    from trtforge.core.sidecar import read_sidecar
    from trtforge.measure.inputs import make_inputs
    from trtforge.measure.routes import relative_error

    data = json.loads(out.read_text())
    assert data["config"]["batches"] == [1]  # the default: those of 1 and 8 it takes
    [check] = data["checks"]
    assert check["batch"] == 1 and check["output"] == "y" and check["ok"]
    assert 0 < check["rel_error"] < 3e-2, check  # FP16 against FP32: not a self-compare
    sidecar = read_sidecar(artifact)
    feed = make_inputs(sidecar.inputs, sidecar.profiles, 1)
    assert feed["ids"].dtype == np.int64 and feed["mask"].dtype == bool
    fp32, fp16 = (session(str(artifact.parent / sidecar.source[key])).run(None, feed)[0]
                  for key in ("reference_onnx_file", "onnx_file"))
    assert sidecar.source["onnx_file"] == "ids_mask_fp16.onnx"
    expected = relative_error(torch.from_numpy(fp16), torch.from_numpy(fp32))
    assert expected > 0 and check["rel_error"] == pytest.approx(expected, rel=1e-6)


def test_bench_runs_a_model_without_inputs(tiny_artifacts, tmp_path):
    """A graph with no inputs is timed and checked at batch 1 (it crashed with an IndexError on ``inputs[0]``)."""
    from cli_in_process import run

    out = tmp_path / "bench.json"
    done = run(["bench", tiny_artifacts["no_input"], *BENCH_CPU, "--json", out])
    assert done.returncode == 0, done.stderr
    data = json.loads(out.read_text())
    assert [(r["batch"], r["kind"]) for r in data["rows"]] == [(1, "model")]
    assert [(c["batch"], c["ok"]) for c in data["checks"]] == [(1, True)]


def test_bench_refuses_a_batch_the_artifact_cannot_take_before_any_work(tiny_artifacts, monkeypatch):
    """``--batch 8`` on a static batch-1 artifact: one ``error:`` line naming ``--batch 1`` (exit 1 or 2), before any
    route opens; in Python the same refusal names ``batches=[1]``."""
    from cli_in_process import run

    from trtforge.core.errors import InvalidArgument
    from trtforge.measure.routes import run_bench_command

    def forbidden(*args, **kwargs):
        raise AssertionError("a route was opened; the batch should have been refused first")

    import importlib

    # the module, not the function ``trtforge.runtime`` exports under the same name
    monkeypatch.setattr(importlib.import_module("trtforge.runtime.load"), "load", forbidden)
    artifact = tiny_artifacts["ids_mask"]
    done = run(["bench", artifact, *BENCH_CPU, "--batch", "8"])
    errors = [line for line in (done.stdout + done.stderr).splitlines() if line.startswith("error:")]
    assert done.returncode in (1, 2) and len(errors) == 1, done.stdout + done.stderr
    assert errors[0].startswith("error: batch 8: ids_mask takes batch 1 only") and "--batch 1" in errors[0]
    assert "Traceback" not in done.stderr and "batches=[" not in errors[0]
    with pytest.raises(InvalidArgument, match=r"batch 8: ids_mask takes batch 1 only.*batches=\[1\]") as refused:
        run_bench_command(str(artifact), ["onnxruntime"], [8], warmup=1, repeats=1, device="cpu")
    assert "--batch 1" not in str(refused.value)


def test_batch_range_static_dynamic_and_no_inputs():
    """(smallest, largest) batch a model takes: a static dim 0 twice, the profiles' widest span when dynamic (None
    when no profile bounds it), 1 and 1 without a sample axis (no inputs, or a rank-0 input)."""
    from trtforge.core.specs import TensorSpec
    from trtforge.measure.inputs import batch_range

    ids, mask = TensorSpec("ids", "int64", (1, 6)), TensorSpec("mask", "bool", (1, 6))
    assert batch_range((ids, mask), ()) == (1, 1)
    assert batch_range((TensorSpec("x", "float32", (2, 3)),), ()) == (2, 2)
    dynamic = (TensorSpec("x", "float32", (-1, 3)),)
    profiles = ({"x": {"min": [2, 3], "opt": [4, 3], "max": [4, 3]}},
                {"x": {"min": [1, 3], "opt": [8, 3], "max": [16, 3]}})
    assert batch_range(dynamic, profiles) == (1, 16)
    assert batch_range(dynamic, profiles[:1]) == (2, 4)
    assert batch_range(dynamic, ()) is None  # a bare ONNX file: nothing bounds it
    assert batch_range(dynamic, ({"other": {"min": [1], "opt": [1], "max": [1]}},)) is None
    assert batch_range((), ()) == (1, 1)
    assert batch_range((TensorSpec("s", "float32", ()),), ()) == (1, 1)


@pytest.mark.parametrize(("shape", "profile", "default"), [
    ((1, 6), None, [1]), ((-1, 6), (1, 16), [1, 8]), ((-1, 6), (4, 16), [8]), ((-1, 6), (2, 4), [2]),
    ((-1, 6), None, [1, 8]), ((), None, [1]),
])
def test_bench_default_batches_are_those_of_1_and_8_the_model_takes(shape, profile, default):
    """No ``--batch``: 1 and 8 where the model takes them, else its smallest batch; given batches pass as they are
    when taken, and a batch outside the range is refused naming the range."""
    from trtforge.core.errors import InvalidArgument
    from trtforge.core.specs import TensorSpec
    from trtforge.measure.routes import BenchModel, bench_batches

    profiles = () if profile is None else ({"x": {"min": [profile[0], 6], "opt": [profile[0], 6],
                                                  "max": [profile[1], 6]}},)
    model = BenchModel("m", lambda route, device: None, (TensorSpec("x", "float32", shape),), {}, "classification",
                       profiles)
    assert bench_batches(model, None) == default
    assert bench_batches(model, default) == default
    if profile is not None:
        with pytest.raises(InvalidArgument, match=rf"batch 32: m takes batches {profile[0]} to {profile[1]}"):
            bench_batches(model, [profile[0], 32])
