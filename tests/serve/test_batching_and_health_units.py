"""The pieces the stub runs, without Triton: per-request checks, exact splits, the fallback state."""

from __future__ import annotations

import threading

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
from trtforge.serve.health import FallbackState, HealthPolicy, run_with_timeout

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
    assert run_with_timeout(lambda: None, 1.0) == ""
    assert "longer than 0.1 s" in run_with_timeout(lambda: release.wait(5), 0.1)
    release.set()
    assert run_with_timeout(lambda: 1 / 0, 1.0).startswith("ZeroDivisionError")
