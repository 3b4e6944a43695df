"""trtforge.serve on a real tritonserver (loopback only): answers, batching, bad requests, admin."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from tests.serve.artifacts import expected, make_artifact
from tests.serve.conftest import TOKEN, grpc_infer, http_status, metric
from trtforge.core.errors import NotPermitted
from trtforge.serve.server import SwapRefused


@pytest.fixture(scope="module")
def server(linear_v1):
    from tests.serve.conftest import serve_config
    from trtforge.serve.server import Server

    with Server([linear_v1], serve_config(max_delay_ms=20)) as running:
        yield running
    assert not running.running


@pytest.mark.slow
def test_answers_match_the_model_over_grpc_and_http(server):
    from tritonclient.http import InferenceServerClient, InferInput

    assert server.models == ["linear"]
    x = np.random.default_rng(0).random((3, 4), dtype=np.float32)
    np.testing.assert_allclose(grpc_infer(server, x), expected(x, 1.0), rtol=1e-5, atol=1e-6)
    client = InferenceServerClient(server.url("http").removeprefix("http://"))
    tensor = InferInput("x", [3, 4], "FP32")
    tensor.set_data_from_numpy(x)
    np.testing.assert_allclose(client.infer("linear", [tensor]).as_numpy("y"), expected(x, 1.0), rtol=1e-5, atol=1e-6)
    assert server.status("linear") == {"ready": True, "degraded": False, "route": "onnxruntime", "reason": "",
                                       "state": "ready"}
    assert server.served() == {"linear": "serves route onnxruntime on linear.onnx"}  # what runs, said (issue 35)
    assert "trtforge: linear serves route onnxruntime on linear.onnx" in server.log_tail(400)


def test_config_comes_from_the_sidecar(server):
    from tritonclient.grpc import InferenceServerClient

    config = InferenceServerClient(server.url("grpc")).get_model_config("linear", as_json=True)["config"]
    assert config["max_batch_size"] == 16
    assert config["input"][0]["dims"] == ["4"] and config["output"][0]["dims"] == ["3"]
    assert config["dynamic_batching"]["preferred_batch_size"] == [2, 4, 6, 8, 10, 12, 14, 16]  # steps of 16 / 8


def test_concurrent_requests_share_model_calls_and_each_gets_its_rows(server):
    rng = np.random.default_rng(1)
    inputs = [rng.random((1 + i % 3, 4), dtype=np.float32) for i in range(96)]
    calls_before = metric(server, "trtforge_model_calls_total")
    execs_before = metric(server, "nv_inference_exec_count")
    rows_before = metric(server, "nv_inference_count")
    with ThreadPoolExecutor(16) as pool:
        outputs = list(pool.map(lambda x: grpc_infer(server, x), inputs, timeout=120))
    for x, y in zip(inputs, outputs, strict=True):
        np.testing.assert_allclose(y, expected(x, 1.0), rtol=1e-5, atol=1e-6)
    calls = metric(server, "trtforge_model_calls_total") - calls_before
    assert metric(server, "nv_inference_count") - rows_before == sum(len(x) for x in inputs)
    assert calls == metric(server, "nv_inference_exec_count") - execs_before
    assert 1 <= calls < 96, f"{calls} model calls for 96 concurrent requests: the batcher formed no batch"


@pytest.mark.parametrize("make_bad, message", [
    (lambda: np.zeros((2, 5), np.float32), "unexpected shape"),
    (lambda: np.zeros((2, 4), np.float64), "data-type is 'FP64', but model 'linear' expects 'FP32'"),
    (lambda: np.zeros((17, 4), np.float32), "batch-size must be <= 16"),
])
def test_bad_requests_fail_alone_with_a_clear_error(server, make_bad, message):
    from tritonclient.utils import InferenceServerException

    good = [np.full((1, 4), i, np.float32) for i in range(8)]

    def call(x):
        try:
            return grpc_infer(server, x)
        except InferenceServerException as exc:
            return exc

    with ThreadPoolExecutor(9) as pool:
        results = list(pool.map(call, [*good[:4], make_bad(), *good[4:]], timeout=60))
    bad = results.pop(4)
    assert isinstance(bad, InferenceServerException) and message in str(bad), bad
    for x, y in zip(good, results, strict=True):
        np.testing.assert_allclose(y, expected(x, 1.0), rtol=1e-5, atol=1e-6)
    assert server.running


def test_unknown_model_and_oversized_body_are_refused_and_the_server_stays_up(server):
    from tritonclient.utils import InferenceServerException

    with pytest.raises(InferenceServerException, match="unknown|not found"):
        grpc_infer(server, np.zeros((1, 4), np.float32), model="no_such_model")
    body = json.dumps({"inputs": [{"name": "x", "shape": [4096, 4], "datatype": "FP32",
                                   "data": [0.0] * (4096 * 4)}]}).encode()
    assert http_status(f"{server.url('http')}/v2/models/linear/infer", body) == 400
    np.testing.assert_allclose(grpc_infer(server, np.ones((1, 4), np.float32)), expected(np.ones((1, 4), np.float32), 1.0),
                               rtol=1e-5)


def test_admin_without_the_token_is_refused(server, linear_v1):
    url = f"{server.url('http')}/v2/repository/models/linear/load"
    assert http_status(url, b"{}") in (401, 403)
    assert http_status(url, b"{}", {"admin-key": "wrong"}) in (401, 403)
    with pytest.raises(NotPermitted, match="admin token"):
        server.reload("linear", linear_v1, token=None)
    with pytest.raises(SwapRefused, match="refused"):
        server.reload("linear", linear_v1, token="wrong")
    assert server.status("linear")["ready"]


@pytest.mark.slow
def test_corrupt_new_artifact_is_refused_while_the_old_one_serves(server, tmp_path):
    x = np.ones((2, 4), np.float32)
    broken_engine = make_artifact(tmp_path / "engine", scale=2.0)
    broken_engine.with_suffix(".engine").write_bytes(b"tampered")
    with pytest.raises(SwapRefused, match="sha256|does not match"):
        server.reload("linear", broken_engine, token=TOKEN)
    good = make_artifact(tmp_path / "good", scale=2.0)
    with pytest.raises(SwapRefused, match="refusing it"):
        server.reload("linear", good, token=TOKEN, sha256="0" * 64)  # not the engine the caller meant
    with pytest.raises(ValueError, match="no model 'other'"):
        server.reload("other", good, token=TOKEN)
    broken_onnx = make_artifact(tmp_path / "onnx", scale=2.0)
    broken_onnx.with_suffix(".onnx").write_bytes(b"not an onnx graph")
    with pytest.raises(SwapRefused):
        server.reload("linear", broken_onnx, token=TOKEN)
    time.sleep(0.5)
    np.testing.assert_allclose(grpc_infer(server, x), expected(x, 1.0), rtol=1e-5, atol=1e-6)
    assert server.status("linear")["ready"]


@pytest.mark.slow
def test_a_cuda_graph_engine_is_only_called_at_bucket_sizes(start_server, tmp_path):
    from trtforge.serve.batching import graph_buckets

    artifact = make_artifact(tmp_path / "graphs", scale=1.0, max_batch=16)
    server = start_server([artifact], route="cuda_graph", max_delay_ms=20,
                          engine_factory="tests.serve.doubles:recording_graph_engine")
    xs = [np.random.default_rng(i).random((1 + i % 3, 4), dtype=np.float32) for i in range(24)]
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda x: grpc_infer(server, x), xs))
    for x, y in zip(xs, answers, strict=True):
        np.testing.assert_allclose(y, expected(x, 1.0), rtol=1e-5, atol=1e-6)
    sizes = [int(line) for line in (tmp_path / "graphs" / "batch-sizes.txt").read_text().split()]
    buckets = graph_buckets(16, preferred=tuple(range(2, 17, 2)))  # the batcher's preferred sizes (a grid)
    assert buckets == (1, *range(2, 17, 2)) and set(sizes) <= set(buckets), sizes
    assert sizes[:9] == sorted(buckets, reverse=True)  # every bucket was captured at load (warm-up), largest first
    padded = sum(sizes[9:]) - sum(len(x) for x in xs)
    assert metric(server, "trtforge_padded_rows_total") == padded >= 0
