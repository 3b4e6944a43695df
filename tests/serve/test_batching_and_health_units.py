"""The pieces the stub runs, without Triton: per-request checks, exact splits, the fallback state."""

from __future__ import annotations

import http.server
import threading
import time

import numpy as np
import pytest

from trtforge.core.specs import TensorSpec
from trtforge.serve.batching import (
    BadRequest,
    check_request,
    graph_buckets,
    max_shapes,
    padded_rows,
    run_together,
)
from trtforge.serve.health import FallbackState, HealthPolicy, HealthWorker
from trtforge.serve.server import endpoints_ready, free_ports

SPECS = (TensorSpec("a", "float32", (-1, 2)), TensorSpec("b", "int64", (-1, 3)))


def test_requests_run_as_one_call_and_each_gets_exactly_its_rows():
    calls = []

    def engine(a, b):
        calls.append(len(a))
        return {"sum": a.sum(axis=1) + b.sum(axis=1), "first": a[:, :1]}

    requests = [{"a": np.full((n, 2), n, np.float32), "b": np.ones((n, 3), np.int64)} for n in (1, 3, 2)]
    checked = [check_request(SPECS, r, max_batch=8) for r in requests]
    results = run_together(engine, checked, ["sum", "first"], batched=True)
    assert calls == [6]
    for request, result in zip(requests, results, strict=True):
        np.testing.assert_array_equal(result["sum"], request["a"].sum(axis=1) + 3)
        np.testing.assert_array_equal(result["first"], request["a"][:, :1])


def test_cuda_graph_engines_get_bucket_sizes_and_requests_still_get_their_own_rows():
    assert graph_buckets(48) == (1, 2, 4, 8, 16, 32, 48)
    assert graph_buckets(64) == (1, 2, 4, 8, 16, 32, 64) and graph_buckets(1) == (1,)
    assert [padded_rows(n, graph_buckets(48)) for n in (1, 3, 5, 17, 33, 48)] == [1, 4, 8, 32, 48, 48]
    calls = []

    def engine(a, b):
        calls.append((len(a), a[-1].tolist()))
        return {"sum": a.sum(axis=1) + b.sum(axis=1)}

    requests = [{"a": np.full((n, 2), n, np.float32), "b": np.ones((n, 3), np.int64)} for n in (1, 3, 2)]
    checked = [check_request(SPECS, r, max_batch=8) for r in requests]
    results = run_together(engine, checked, ["sum"], batched=True, buckets=graph_buckets(8))
    assert calls == [(8, [0.0, 0.0])]  # 6 rows padded with zeros to the bucket of 8
    for request, result in zip(requests, results, strict=True):
        np.testing.assert_array_equal(result["sum"], request["a"].sum(axis=1) + 3)


@pytest.mark.parametrize("request_, message", [
    ({"a": np.zeros((1, 2), np.float64), "b": np.zeros((1, 3), np.int64)}, "'a' is float64; the model takes float32"),
    ({"a": np.zeros((1, 4), np.float32), "b": np.zeros((1, 3), np.int64)}, "'a' has shape [1, 4]"),
    ({"a": np.zeros((2, 2), np.float32), "b": np.zeros((1, 3), np.int64)}, "disagree on the batch size"),
    ({"a": np.zeros((9, 2), np.float32), "b": np.zeros((9, 3), np.int64)}, "batch of 9 rows; the model takes 1 to 8"),
    ({"a": np.zeros((1, 2), np.float32)}, "the model takes ['a', 'b']"),
])
def test_bad_requests_are_named(request_, message):
    with pytest.raises(BadRequest) as error:
        check_request(SPECS, request_, max_batch=8)
    assert message in str(error.value)


def test_dynamic_dims_are_bounded_by_the_profiles():
    specs = (TensorSpec("tokens", "int64", (-1, -1)),)
    profiles = ({"tokens": {"min": [1, 1], "opt": [4, 64], "max": [8, 128]}},
                {"tokens": {"min": [1, 1], "opt": [1, 256], "max": [1, 512]}})
    limits = max_shapes(profiles)
    assert limits == {"tokens": (8, 512)}
    assert check_request(specs, {"tokens": np.zeros((2, 512), np.int64)}, 8, limits).rows == 2
    with pytest.raises(BadRequest, match=r"beyond the profile's largest \[8, 512\]"):
        check_request(specs, {"tokens": np.zeros((1, 513), np.int64)}, 8, limits)


def test_an_engine_that_drops_the_batch_axis_is_caught():
    checked = [check_request(SPECS[:1], {"a": np.zeros((2, 2), np.float32)}, max_batch=8)] * 2
    with pytest.raises(ValueError, match="2 rows for 4 input rows"):
        run_together(lambda a: {"y": a[:2]}, checked, ["y"], batched=True)


def test_fallback_after_n_failures_and_back_after_m_passes():
    state = FallbackState(HealthPolicy(fallback_after=2, recover_after=3))
    assert state.record(False, "boom") is False and not state.degraded
    assert state.record(True) is False  # a pass resets the failure count
    assert [state.record(False, "boom"), state.record(False, "boom 2")] == [False, True]
    assert state.degraded and state.reason == "boom 2" and state.fallbacks == 1
    assert [state.record(True), state.record(True), state.record(False, "again")] == [False, False, False]
    assert [state.record(True), state.record(True), state.record(True)] == [False, False, True]
    assert not state.degraded and state.reason == "" and state.fallbacks == 1
    with pytest.raises(ValueError):
        HealthPolicy(fallback_after=0)


def test_health_check_timeout_and_error_are_reasons():
    release = threading.Event()
    worker = HealthWorker()
    try:
        assert worker.check(lambda: None, 1.0) == ""
        assert "longer than 0.1 s" in worker.check(lambda: release.wait(5), 0.1)
        release.set()
        assert worker.thread.is_alive()
        for _ in range(50):  # the timed-out check returns on its own thread
            if worker.check(lambda: 1 / 0, 1.0).startswith("ZeroDivisionError"):
                break
            time.sleep(0.05)
        else:
            raise AssertionError("the worker never ran the next check")
    finally:
        worker.stop()
    worker.thread.join(5)
    assert not worker.thread.is_alive()


def test_a_hung_check_keeps_one_thread_and_later_checks_say_it_is_still_running():
    """Before: each timed-out check left a thread behind and the next check started another."""
    release, started = threading.Event(), []
    worker = HealthWorker()
    before = threading.active_count()
    try:
        def hang() -> None:
            started.append(threading.get_ident())
            release.wait(10)

        assert "longer than 0.05 s" in worker.check(hang, 0.05)
        for _ in range(5):
            assert "still running" in worker.check(hang, 0.05)
        assert len(started) == 1 and threading.active_count() == before
    finally:
        release.set()
        worker.stop()


def test_cuda_graph_buckets_come_from_the_preferred_sizes_and_padding_is_counted():
    assert graph_buckets(32, preferred=(16, 32)) == (1, 2, 4, 8, 16, 32)
    assert graph_buckets(32, preferred=(4, 64)) == (1, 2, 4, 32)
    calls = []

    def engine(a, b):
        calls.append(len(a))
        return {"sum": a.sum(axis=1) + b.sum(axis=1)}

    requests = [{"a": np.full((n, 2), n, np.float32), "b": np.ones((n, 3), np.int64)} for n in (3, 2)]
    checked = [check_request(SPECS, r, max_batch=32) for r in requests]
    results, padded = run_together(engine, checked, ["sum"], batched=True, buckets=(4, 8), with_padding=True)
    assert calls == [8] and padded == 3
    for request, result in zip(requests, results, strict=True):
        np.testing.assert_array_equal(result["sum"], request["a"].sum(axis=1) + 3)


def test_torch_inputs_are_checked_and_joined_like_arrays():
    import torch

    specs = (TensorSpec("a", "float32", (-1, 2)),)
    checked = [check_request(specs, {"a": torch.full((n, 2), float(n))}, max_batch=8) for n in (1, 2)]
    with pytest.raises(BadRequest, match="'a' is int64"):
        check_request(specs, {"a": torch.zeros((1, 2), dtype=torch.int64)}, max_batch=8)
    results = run_together(lambda a: {"y": a * 2}, checked, ["y"], batched=True, buckets=(4,))
    np.testing.assert_array_equal(results[1]["y"], np.full((2, 2), 4.0, np.float32))


def test_copy_rows_equals_concatenation_and_zeroes_the_rest():
    from trtforge.runtime.staging import copy_rows

    rng = np.random.default_rng(0)
    parts = [rng.normal(size=(n, 3, 64, 64)).astype(np.float32) for n in (1, 4, 2, 1)]  # the 4-row part (> 1 MiB) on threads
    dst = np.full((12, 3, 64, 64), 7.0, np.float32)
    assert copy_rows(dst, parts) == 8
    np.testing.assert_array_equal(dst[:8], np.concatenate(parts))
    assert not dst[8:].any()
    with pytest.raises(ValueError, match="do not fit"):
        copy_rows(dst[:4], parts)


def test_host_buffer_grows_only_and_views_any_dtype():
    import torch

    from trtforge.runtime.staging import HostBuffer

    buf = HostBuffer(torch.device("cpu"))
    big = buf.view((4, 8), torch.float32).numpy()
    small = buf.view((3,), torch.float16).numpy()
    assert buf.holds(big) and buf.holds(small) and small.dtype == np.float16
    assert small.__array_interface__["data"][0] == big.__array_interface__["data"][0]  # reused, not new
    grown = buf.view((64, 8), torch.float32)
    assert grown.shape == (64, 8) and not buf.holds(big)


def test_host_requests_for_an_engine_on_a_device_are_uploaded_there_and_get_host_outputs():
    """Host rows for an engine on a device go into one tensor there, request by request, padding rows
    zeroed (no join on the host); the requests still get NumPy back. The CPU stands in for the GPU
    (``_upload`` takes the device; tests/serve/test_gpu_inputs.py runs it on a real one)."""
    import torch

    from trtforge.serve.batching import _upload

    rng = np.random.default_rng(0)
    parts = [rng.normal(size=(n, 3, 4, 4)).astype(np.float32) for n in (2, 1, 3)]
    joined = _upload(parts, 8, torch.device("cpu"))
    assert isinstance(joined, torch.Tensor) and joined.dtype == torch.float32 and tuple(joined.shape) == (8, 3, 4, 4)
    np.testing.assert_array_equal(joined[:6].numpy(), np.concatenate(parts))
    assert not joined[6:].any()

    seen = []

    class DeviceEngine:
        device = "cpu"  # a CPU engine: the host join as before

        def __call__(self, a):
            seen.append(type(a))
            return {"y": torch.as_tensor(a) * 2}

    specs = (TensorSpec("a", "float32", (-1, 3, 4, 4)),)
    checked = [check_request(specs, {"a": p}, max_batch=8) for p in parts]
    results = run_together(DeviceEngine(), checked, ["y"], batched=True, buckets=(8,))
    assert seen == [np.ndarray]
    for part, result in zip(parts, results, strict=True):
        assert isinstance(result["y"], np.ndarray)
        np.testing.assert_array_equal(result["y"], part * 2)


def test_gpu_rows_counts_the_requests_whose_inputs_arrived_on_the_gpu():
    from types import SimpleNamespace

    from trtforge.serve.batching import Checked, gpu_rows

    on_gpu = SimpleNamespace(is_cuda=True)  # what DLPack hands over from CUDA shared memory
    checked = [Checked((np.zeros((2, 3)),), 2), Checked((on_gpu,), 3), Checked((np.zeros((1, 3)), on_gpu), 1)]
    assert gpu_rows(checked) == 4 and gpu_rows(checked[:1]) == 0


class _Answer(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server's name
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


def _listening() -> tuple[http.server.HTTPServer, str]:
    server = http.server.HTTPServer(("127.0.0.1", 0), _Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def test_a_server_is_ready_only_once_its_metrics_port_answers_too():
    """tritonserver opens its metrics port after the HTTP one: a server ready by HTTP alone refused the first
    status() call (CI, 2026-12-02: Connection refused on the metrics port right after start)."""
    triton_http, http_url = _listening()
    closed = free_ports(1)[0]  # nothing listens there
    try:
        assert not endpoints_ready(http_url, f"http://127.0.0.1:{closed}/metrics")
        metrics, metrics_url = _listening()
        try:
            assert endpoints_ready(http_url, f"{metrics_url}/metrics")
        finally:
            metrics.shutdown()
            metrics.server_close()
    finally:
        triton_http.shutdown()
        triton_http.server_close()


def test_preferred_sizes_are_a_grid_of_eight_steps_with_the_profile_sizes():
    from trtforge.serve.repository import preferred_sizes

    assert preferred_sizes(64, (32, 64)) == (8, 16, 24, 32, 40, 48, 56, 64)
    assert preferred_sizes(16, (4, 16)) == (2, 4, 6, 8, 10, 12, 14, 16)
    assert preferred_sizes(100, (50, 100)) == (13, 26, 39, 50, 52, 65, 78, 91, 100)
    assert preferred_sizes(1, (1, 1)) == (1,)
    assert len(graph_buckets(256, preferred_sizes(256, (128, 256)))) <= 16  # the engines' graph cache


def test_the_grid_pads_a_batch_by_less_than_one_step():
    """The sizes the batcher formed in the H200 runs (about 17 to 40 rows): the profile's (opt, max)
    alone padded them by a quarter; the grid's buckets by under one step of 8."""
    from trtforge.serve.repository import preferred_sizes

    formed = range(17, 41)
    old = graph_buckets(64, (32, 64))
    new = graph_buckets(64, preferred_sizes(64, (32, 64)))
    pad = {name: sum(padded_rows(n, b) - n for n in formed) / sum(formed) for name, b in (("old", old), ("new", new))}
    assert max(padded_rows(n, new) - n for n in formed) < 8
    assert pad["old"] > 0.25 and pad["new"] < 0.13, pad
