"""Serving's safety fixes (issue 26), each against a real tritonserver where one is involved: health
checks through the instance lock, the admin token off the command line, reloads that would change
the served signature, ports and routes refused before Triton starts, exports a route cannot run,
and relocatable stub environments."""

from __future__ import annotations

import dataclasses
import shutil
import socket
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tests.serve.artifacts import expected, make_artifact, make_image_artifact
from tests.serve.conftest import TOKEN, grpc_infer, http_status, serve_config
from trtforge.cli import app
from trtforge.core.errors import InvalidArgument, Unsupported
from trtforge.core.sidecar import SourceRecord, read_sidecar, write_sidecar
from trtforge.serve.environment import default_stub_env
from trtforge.serve.health import HealthPolicy
from trtforge.serve.repository import export_triton
from trtforge.serve.server import ServeConfig, Server, SwapRefused, free_ports, triton_command


def _calls(path: Path) -> list[tuple[float, float, str, int]]:
    rows = [line.split() for line in path.read_text().splitlines()] if path.exists() else []
    return [(float(a), float(b), name, int(ident)) for a, b, name, ident in rows]


@pytest.mark.slow
def test_health_checks_go_through_the_instance_lock_on_one_worker(start_server, tmp_path):
    """Before: the health thread called the engine beside a batch (engines reuse output buffers),
    and every timed-out check left one more thread calling the engine."""
    artifact = make_artifact(tmp_path / "slow")
    policy = HealthPolicy(interval_s=0.05, timeout_s=0.1, fallback_after=1000, recover_after=1)
    server = start_server([artifact], route="eager", fallback_route="onnxruntime", health=policy,
                          engine_factory="tests.serve.doubles:slow_recording", max_delay_ms=0)
    (artifact.parent / "calls.txt").unlink(missing_ok=True)  # the warm-up calls
    stop = threading.Event()

    def client(i: int) -> None:
        while not stop.is_set():
            x = np.full((1, 4), i, np.float32)
            np.testing.assert_allclose(grpc_infer(server, x), expected(x, 1.0), rtol=1e-5)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    time.sleep(3.0)
    stop.set()
    for t in threads:
        t.join(30)
    calls = sorted(_calls(artifact.parent / "calls.txt"))
    health = {ident for *_, name, ident in calls if name.startswith("trtforge-health")}
    assert len(calls) > 5 and health, calls
    overlaps = [(a, b) for a, b in zip(calls, calls[1:], strict=False) if b[0] < a[1] - 1e-3]
    assert not overlaps, f"engine calls overlapped: {overlaps[:3]}"
    assert len(health) == 1, f"{len(health)} health-check threads called the engine"


@pytest.mark.slow
def test_admin_token_is_not_on_tritonservers_command_line(start_server, linear_v1):
    server = start_server([linear_v1], admin_token="s3cret-token-for-the-test")
    command = Path(f"/proc/{server._process.pid}/cmdline").read_bytes().decode()
    assert "tritonserver" in command and "s3cret-token-for-the-test" not in command
    url = f"{server.url('http')}/v2/repository/models/linear/load"
    assert http_status(url, b"{}", {"admin-key": "@TRTFORGE_ADMIN_TOKEN@"}) in (401, 403)  # the placeholder is no key
    server.reload("linear", linear_v1, token="s3cret-token-for-the-test")  # the real token works
    assert not any(server._work.glob("admin-token")), "the token file outlives the start-up"


@pytest.mark.slow
def test_reload_refuses_another_signature_unless_allowed(start_server, linear_v1, tmp_path):
    server = start_server([linear_v1])
    image = make_image_artifact(tmp_path / "image", name="linear")  # same name, other inputs and outputs
    with pytest.raises(SwapRefused, match="clients would fail") as refused:
        server.reload("linear", image, token=TOKEN)
    assert "\n" not in str(refused.value) and "x float32 [4]" in str(refused.value)
    x = np.ones((2, 4), np.float32)
    np.testing.assert_allclose(grpc_infer(server, x), expected(x, 1.0), rtol=1e-5)  # the old model serves on
    server.reload("linear", image, token=TOKEN, allow_signature_change=True)
    assert server.status("linear")["ready"]


def test_ports_are_checked_before_anything_starts(linear_v1):
    with pytest.raises(InvalidArgument, match="--http-port 70000 is not a TCP port"):
        ServeConfig(http_port=70000)
    result = CliRunner().invoke(app, ["serve", str(linear_v1), "--grpc-port", "0"])
    assert result.exit_code == 2 and "--grpc-port 0 is not a TCP port" in result.output
    assert "Traceback" not in result.output
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        http, grpc, _ = free_ports()
        server = Server([linear_v1], ServeConfig(http_port=http, grpc_port=grpc, metrics_port=port))
        with pytest.raises(InvalidArgument, match=f"--metrics-port {port} on 127.0.0.1 is taken"):
            server.start()
        assert server._process is None  # tritonserver never started


def test_a_route_that_cannot_run_here_is_refused_in_one_line_before_triton(linear_v1):
    """Before: a 31-line Triton log with the reason cut off (tensorrt here: no GPU)."""
    http, grpc, metrics = free_ports()
    result = CliRunner().invoke(app, ["serve", str(linear_v1), "--route", "tensorrt", "--http-port", str(http),
                                      "--grpc-port", str(grpc), "--metrics-port", str(metrics)])
    assert result.exit_code == 2, result.output
    assert "route 'tensorrt' needs a CUDA GPU" in result.output and len(result.output.strip().splitlines()) == 1
    with pytest.raises(Unsupported, match="names no model factory"):
        Server([linear_v1], serve_config(route="eager"))


def _direct_path_artifact(folder: Path) -> Path:
    """A sidecar as the direct path writes it: no ONNX file beside the engine."""
    source = make_artifact(folder)
    record = read_sidecar(source)
    direct = SourceRecord(kind="torch", path="direct", factory="trtforge.zoo:efficientnet_lite0")
    (folder / "linear.onnx").unlink()
    source.unlink()
    return write_sidecar(source, dataclasses.replace(record, source=direct, path=None))


def test_export_refuses_a_route_the_artifact_cannot_take(tmp_path):
    artifact = _direct_path_artifact(tmp_path / "direct")
    result = CliRunner().invoke(app, ["export", "triton", str(artifact), "--repo", str(tmp_path / "repo"),
                                      "--backend", "python", "--route", "onnxruntime"])
    assert result.exit_code == 2 and "has none (built on the direct path" in result.output
    assert "--route eager" in result.output and not (tmp_path / "repo").exists()


@pytest.mark.slow
def test_an_exported_stub_env_beside_the_repository_moves_with_it(tmp_path, start_server):
    """Before: EXECUTION_ENV_PATH was the absolute host path, so the deployment could not move."""
    deploy = tmp_path / "deploy"
    deploy.mkdir()
    (deploy / "stub-env").symlink_to(default_stub_env().resolve())
    with pytest.raises(InvalidArgument, match="inside --repo"):
        export_triton([make_artifact(tmp_path / "source", scale=3.0)], deploy / "models", backend="python",
                      stub_env=deploy / "models" / "env")
    folders = export_triton([tmp_path / "source" / "linear.json"], deploy / "models", backend="python",
                            route="onnxruntime", stub_env=deploy / "stub-env")
    text = (folders[0] / "config.pbtxt").read_text()
    assert "$$TRITON_MODEL_DIRECTORY/../../stub-env" in text and str(tmp_path) not in text
    moved = Path(shutil.move(deploy, tmp_path / "elsewhere"))
    server = start_server([], repository=moved / "models")
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_allclose(grpc_infer(server, x), expected(x, 3.0), rtol=1e-5)


def test_gpu_metrics_are_on_where_there_is_a_gpu(tmp_path):
    def flag(gpus: int) -> str:
        command = triton_command(tmp_path / "tritonserver", tmp_path, tmp_path, ServeConfig(), "x", gpus)
        return next(a for a in command if a.startswith("--allow-gpu-metrics"))

    assert flag(1) == "--allow-gpu-metrics=true" and flag(0) == "--allow-gpu-metrics=false"


@pytest.mark.slow
def test_a_model_that_fails_to_load_is_reported_in_one_line(linear_v1):
    server = Server([linear_v1], serve_config(engine_factory="tests.serve.doubles:refusing_to_load"))
    with pytest.raises(Unsupported) as failed:
        server.start()
    assert str(failed.value) == ("tritonserver could not start: model 'linear' failed to load: RuntimeError: route "
                                 "onnxruntime cannot run on this test machine (a double that refuses to load)")
