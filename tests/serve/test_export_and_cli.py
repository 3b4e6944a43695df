"""``trtforge export triton`` (configs parsed by Triton's own protobuf; the Python-backend repository
served by the real tritonserver) and ``trtforge serve`` as a command (endpoints printed, Ctrl-C stops)."""

from __future__ import annotations

import contextlib
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tests.serve.artifacts import expected, make_artifact
from tests.serve.conftest import free_ports, grpc_infer
from trtforge.cli import app
from trtforge.core.errors import FileConflict
from trtforge.core.sidecar import EngineHashMismatch
from trtforge.serve.environment import default_stub_env
from trtforge.serve.repository import export_triton


def parse_config(path: Path):
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    return text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())


def test_tensorrt_repository_config_parses_with_the_engine_as_model_plan(tmp_path, linear_v1):
    result = CliRunner().invoke(app, ["export", "triton", str(linear_v1), "--repo", str(tmp_path / "repo"),
                                      "--instances", "2"])
    assert result.exit_code == 0, result.output
    config = parse_config(tmp_path / "repo" / "linear" / "config.pbtxt")
    assert config.platform == "tensorrt_plan" and config.name == "linear"
    assert config.max_batch_size == 16
    assert [(t.name, list(t.dims)) for t in config.input] == [("x", [4])]
    assert [(t.name, list(t.dims)) for t in config.output] == [("y", [3])]
    assert list(config.dynamic_batching.preferred_batch_size) == [2, 4, 6, 8, 10, 12, 14, 16]
    assert config.instance_group[0].count == 2
    assert config.instance_group[0].kind == config.instance_group[0].KIND_GPU
    plan = tmp_path / "repo" / "linear" / "1" / "model.plan"
    assert plan.read_bytes() == linear_v1.with_suffix(".engine").read_bytes()


def test_build_matrix_becomes_cc_model_filenames(tmp_path, linear_v1):
    engines = [make_artifact(tmp_path / t, name=f"linear_{t}", targets=(t,)) for t in ("sm86", "sm120")]
    result = CliRunner().invoke(app, ["export", "triton", *map(str, engines), "--repo", str(tmp_path / "repo"),
                                      "--matrix", "linear"])
    assert result.exit_code == 0, result.output
    config = parse_config(tmp_path / "repo" / "linear" / "config.pbtxt")
    assert config.name == "linear" and config.platform == "tensorrt_plan"
    assert dict(config.cc_model_filenames) == {"8.6": "model_sm86.plan", "12.0": "model_sm120.plan"}
    for target, sidecar in zip(("sm86", "sm120"), engines, strict=True):
        plan = tmp_path / "repo" / "linear" / "1" / f"model_{target}.plan"
        assert plan.read_bytes() == sidecar.with_suffix(".engine").read_bytes()
    with pytest.raises(ValueError, match="built for one target each"):
        export_triton([linear_v1, engines[0]], tmp_path / "repo2", matrix="linear")


def test_export_refusals(tmp_path, linear_v1):
    theirs = tmp_path / "repo" / "linear"
    theirs.mkdir(parents=True)
    with pytest.raises(FileConflict, match="did not write it"):
        export_triton([linear_v1], tmp_path / "repo")
    assert not any(theirs.iterdir())
    tampered = make_artifact(tmp_path / "tampered")
    tampered.with_suffix(".engine").write_bytes(b"tampered")
    with pytest.raises(EngineHashMismatch):
        export_triton([tampered], tmp_path / "repo2")
    result = CliRunner().invoke(app, ["export", "triton", str(linear_v1), "--repo", str(tmp_path / "r3"),
                                      "--backend", "onnx"])
    assert result.exit_code == 2 and "unknown backend 'onnx'" in result.output


@pytest.mark.slow
def test_python_repository_parses_and_serves_without_the_source_folder(tmp_path, start_server):
    source = make_artifact(tmp_path / "source", scale=3.0)
    folders = export_triton([source], tmp_path / "repo", backend="python", route="onnxruntime",
                            stub_env=default_stub_env())
    config = parse_config(folders[0] / "config.pbtxt")
    assert config.backend == "python" and config.parameters["route"].string_value == "onnxruntime"
    assert (folders[0] / "1" / "model.py").is_file()
    shutil.rmtree(tmp_path / "source")  # the repository carries its own copy of the artifact
    server = start_server([], repository=tmp_path / "repo")
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_allclose(grpc_infer(server, x), expected(x, 3.0), rtol=1e-5)


@pytest.mark.slow
def test_serve_command_prints_endpoints_and_stops_on_ctrl_c(linear_v1):
    http, grpc, metrics = free_ports()
    # Python's Ctrl-C handler first: a background ``make test &`` hands its children SIGINT ignored.
    command = [sys.executable, "-c", "import signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
               "from trtforge.cli import app; app()", "serve", str(linear_v1),
               "--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env=dict(os.environ, COLUMNS="200"))
    try:
        lines = _reader(process)
        output = _read_until(lines, "Ctrl-C stops", timeout_s=120)
        assert f"127.0.0.1:{grpc}" in output and f"http://127.0.0.1:{metrics}/metrics" in output
        assert "linear serves route onnxruntime on linear.onnx" in output  # which graph runs (issue 35, item 8)
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 0
        assert "stopped" in _read_until(lines, "stopped", timeout_s=10)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)


def test_serve_command_refuses_a_missing_artifact_in_one_line(tmp_path):
    result = CliRunner().invoke(app, ["serve", str(tmp_path / "nope.json")])
    assert result.exit_code == 2 and "no sidecar" in result.output and "Traceback" not in result.output


def _reader(process: subprocess.Popen) -> queue.Queue[str]:
    """A thread that moves ``process``'s output lines into a queue (reads never block the test)."""
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in process.stdout], daemon=True).start()
    return lines


def _read_until(lines: queue.Queue[str], marker: str, timeout_s: float) -> str:
    text, deadline = "", time.monotonic() + timeout_s
    while marker not in text and time.monotonic() < deadline:
        with contextlib.suppress(queue.Empty):
            text += lines.get(timeout=1)
    assert marker in text, text
    return text


@pytest.mark.needs_trt
def test_a_real_build_exports_as_a_tensorrt_repository(tmp_path, tiny_onnx, engine_store):
    """The serve stage on a real TensorRT-RTX engine, in the fast lane: tiny built at FP16 (through the run's
    engine store), exported, its config parsed by Triton's own protobuf, the plan the engine's bytes."""
    import trtforge

    art = trtforge.compile(tiny_onnx, batch="1:2:4", output_dir=tmp_path / "out", cache_dir=engine_store,
                           progress=False)
    export_triton([art.sidecar_path], tmp_path / "repo")
    config = parse_config(tmp_path / "repo" / art.sidecar.name / "config.pbtxt")
    assert config.platform == "tensorrt_plan" and config.max_batch_size == 4
    assert [t.name for t in config.input] == [s.name for s in art.sidecar.inputs]
    plan = tmp_path / "repo" / art.sidecar.name / "1" / "model.plan"
    assert plan.read_bytes() == art.engine_path.read_bytes() and art.sidecar.builder.flavour == "tensorrt_rtx"


@pytest.mark.needs_trt
def test_the_onnxruntime_route_serves_the_graph_of_the_artifacts_precision(tmp_path, tiny_onnx, engine_store):
    """Issue 35, item 8: ``serve --route onnxruntime`` of an ``_fp16`` artifact ran the FP32 reference graph, and
    nothing said so. The served graph is now the one ``check --route onnxruntime`` runs (the processed FP16 graph),
    named in the model config; its answers are that graph's, not the reference's."""
    import trtforge
    from trtforge.core.ort_session import session
    from trtforge.serve.backend import open_engine

    art = trtforge.compile(tiny_onnx, batch="1:2:4", output_dir=tmp_path / "out", cache_dir=engine_store,
                           progress=False)
    assert art.onnx_path.name == "tiny_fp16.onnx" and art.onnx_path != art.reference_onnx_path
    x = np.random.default_rng(0).standard_normal((2, 3, 16, 16)).astype(np.float32)
    with open_engine(art.sidecar_path, "onnxruntime", {}) as engine:
        served = np.asarray(engine(x)["y"])
    np.testing.assert_array_equal(served, session(art.onnx_path).run(None, {"x": x})[0])
    assert not np.array_equal(served, session(art.reference_onnx_path).run(None, {"x": x})[0])
    export_triton([art.sidecar_path], tmp_path / "repo", backend="python", route="onnxruntime")
    config = parse_config(tmp_path / "repo" / art.sidecar.name / "config.pbtxt")
    assert config.parameters["onnx_graph"].string_value == "tiny_fp16.onnx"
