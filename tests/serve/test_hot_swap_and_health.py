"""Hot swap under load and health-check fallback, on a real tritonserver (loopback, bounded loops)."""

from __future__ import annotations

import os
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from tests.serve.artifacts import expected, make_artifact
from tests.serve.conftest import TOKEN, grpc_infer, http_status, metric
from trtforge.serve.health import HealthPolicy

CLIENTS, REQUESTS = 16, 2000


@pytest.mark.serve_load
def test_hot_swap_under_load_loses_nothing(start_server, linear_v1, tmp_path):
    """2,000 requests from 16 clients, a reload halfway: 0 errors, 0 lost, each answer old or new."""
    from tritonclient.grpc import InferenceServerClient

    server = start_server([linear_v1], max_delay_ms=2)
    v2 = make_artifact(tmp_path / "v2", scale=2.0)
    done, swapped_at, answers = [0], [float("inf")], {}
    lock, halfway, swapped = threading.Lock(), threading.Event(), threading.Event()
    per_client = REQUESTS // CLIENTS

    def client(index: int) -> None:
        grpc = InferenceServerClient(server.url("grpc"))
        for k in range(per_client):
            if halfway.is_set() and not swapped.is_set():  # keep load on through the swap window
                swapped.wait(60 if k >= per_client - 8 else 0.05)  # the last 8 go after the swap
            x = np.full((1, 4), index + k / 1000, np.float32)
            started = time.monotonic()
            y = grpc_infer(server, x, client=grpc)
            with lock:
                answers[(index, k)] = (x, y, started)
                done[0] += 1
                if done[0] == REQUESTS // 2:
                    halfway.set()

    def reload() -> None:
        assert halfway.wait(120)
        try:
            server.reload("linear", v2, token=TOKEN)
        finally:
            swapped_at[0] = time.monotonic()
            swapped.set()

    with ThreadPoolExecutor(CLIENTS + 1) as pool:
        swap = pool.submit(reload)
        for future in [pool.submit(client, i) for i in range(CLIENTS)]:
            future.result(timeout=300)
        swap.result(timeout=300)
    assert len(answers) == REQUESTS
    old = new = 0
    for x, y, started in answers.values():
        if np.allclose(y, expected(x, 1.0), rtol=1e-5):
            old += 1
            assert started < swapped_at[0], "a request sent after the swap finished was answered by the old model"
        else:
            np.testing.assert_allclose(y, expected(x, 2.0), rtol=1e-5)
            new += 1
    assert old >= REQUESTS // 2 and new >= 8 * CLIENTS, (old, new)
    assert metric(server, "trtforge_swaps") == 1
    assert metric(server, "nv_inference_request_failure") == 0


def _wait_for(predicate, timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


@pytest.mark.slow
def test_health_failures_fall_back_and_recovery_switches_back(start_server, tmp_path):
    artifact = make_artifact(tmp_path / "flaky", scale=1.0)
    policy = HealthPolicy(interval_s=0.2, timeout_s=2.0, fallback_after=2, recover_after=3)
    server = start_server([artifact], route="tensorrt", fallback_route="onnxruntime", health=policy,
                          engine_factory="tests.serve.doubles:failing_on_command")
    x = np.ones((2, 4), np.float32)
    assert server.status("linear") == {"ready": True, "degraded": False, "route": "tensorrt", "reason": "",
                                      "state": "ready"}
    flag = artifact.parent / "FAIL-tensorrt"
    flag.touch()
    assert _wait_for(lambda: server.status("linear")["degraded"]), server.log_tail()
    status = server.status("linear")
    assert status["route"] == "onnxruntime" and status["ready"] and status["state"] == "degraded"
    assert "tensorrt engine failing on command" in status["reason"]
    assert metric(server, "trtforge_degraded") == 1
    assert http_status(f"{server.url('http')}/v2/health/ready") == 200  # Triton's own: ready, carries no reason
    np.testing.assert_allclose(grpc_infer(server, x), expected(x, 1.0), rtol=1e-5)  # served by the fallback
    assert metric(server, "trtforge_fallbacks") == 1
    assert metric(server, "trtforge_health_failures") >= 2
    flag.unlink()
    assert _wait_for(lambda: not server.status("linear")["degraded"]), server.log_tail()
    assert server.status("linear") == {"ready": True, "degraded": False, "route": "tensorrt", "reason": "",
                                      "state": "ready"}
    np.testing.assert_allclose(grpc_infer(server, x), expected(x, 1.0), rtol=1e-5)
    assert metric(server, "trtforge_degraded") == 0
    assert "degraded, serving onnxruntime" in server.log_tail(200)


def _replace_artifact(source: Path, target: Path) -> None:
    """Move ``source``'s artifact files over ``target``'s (each an atomic rename; the sidecar last)."""
    for file in sorted(source.parent.iterdir(), key=lambda f: f.suffix == ".json"):
        staged = target.parent / f".{file.name}.new"
        shutil.copyfile(file, staged)
        os.replace(staged, target.parent / file.name)


@pytest.mark.slow
def test_watcher_reloads_a_changed_artifact_and_keeps_the_old_one_on_a_corrupt_one(start_server, tmp_path):
    artifact = make_artifact(tmp_path / "served", scale=1.0)
    server = start_server([artifact], route="onnxruntime", watch_s=0.2)
    x = np.ones((2, 4), np.float32)
    np.testing.assert_allclose(grpc_infer(server, x), expected(x, 1.0), rtol=1e-5)
    _replace_artifact(make_artifact(tmp_path / "v2", scale=2.0), artifact)
    assert _wait_for(lambda: len(server.watch_events) == 1, 60), server.log_tail()
    assert server.watch_events[0]["ok"], server.watch_events
    np.testing.assert_allclose(grpc_infer(server, x), expected(x, 2.0), rtol=1e-5)
    assert metric(server, "trtforge_swaps") == 1

    corrupt = make_artifact(tmp_path / "v3", scale=3.0)
    corrupt.with_suffix(".engine").write_bytes(b"not the engine the sidecar names")  # sha256 mismatch
    _replace_artifact(corrupt, artifact)
    assert _wait_for(lambda: len(server.watch_events) == 2, 60), server.log_tail()
    event = server.watch_events[1]
    assert not event["ok"] and "old model is still serving" in event["reason"], event
    np.testing.assert_allclose(grpc_infer(server, x), expected(x, 2.0), rtol=1e-5)  # v2 serves on
    assert metric(server, "trtforge_swap_failures") == 1
    time.sleep(1.0)  # unchanged files: no retry of the refused artifact
    assert len(server.watch_events) == 2
