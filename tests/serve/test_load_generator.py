"""The serving benchmark's parts on a real tritonserver: the bounded load over gRPC and through
system shared memory, and the null model (uint8 frames taken as they are)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from tests.serve.artifacts import make_artifact, make_image_artifact
from tests.serve.conftest import metric
from trtforge.measure.serving import run_load


@pytest.mark.slow
def test_load_over_grpc_and_shared_memory_is_answered_and_counted(start_server, tmp_path):
    server = start_server([make_artifact(tmp_path / "a")], route="onnxruntime", max_delay_ms=5)
    inputs = {"x": np.ones((1, 4), np.float32)}
    before = set(os.listdir("/dev/shm"))
    for transport, sent in (("grpc", 24), ("shm", 48)):
        load = run_load(server.url("grpc"), "linear", inputs, requests=24, processes=2, threads=3,
                        max_seconds=60, transport=transport)
        assert (load.answered, load.failed, load.in_flight) == (24, 0, 6), load
        assert load.p50_ms <= load.p99_ms and load.throughput > 0
        assert metric(server, "nv_inference_request_success") == sent  # every request reached the model
    assert not [f for f in set(os.listdir("/dev/shm")) - before if f.startswith("trtforge-load")]  # released
    assert rows_by_device(server) == {"cpu": 48.0}  # our per-device counter: one row per request
    assert metric(server, "trtforge_gpu_input_rows") == 0  # host inputs (tests/serve/test_gpu_inputs.py: GPU ones)


def rows_by_device(server) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    found: dict[str, float] = {}
    for family in text_string_to_metric_families(server.metrics_text()):
        for sample in family.samples:
            if sample.name == "trtforge_model_rows_total" and sample.labels.get("model") == "linear":
                found[sample.labels["device"]] = found.get(sample.labels["device"], 0.0) + sample.value
    return found


@pytest.mark.slow
def test_null_model_with_uint8_frames_answers_zeros_without_the_model(start_server, tmp_path):
    from tritonclient.grpc import InferenceServerClient, InferInput

    server = start_server([make_image_artifact(tmp_path / "img")], route="onnxruntime", input_format="uint8",
                          engine_factory="trtforge.measure.serving:null_engine")
    frames = np.full((2, 8, 8, 3), 255, np.uint8)
    tensor = InferInput("image", [2, 8, 8, 3], "UINT8")
    tensor.set_data_from_numpy(frames)
    logits = InferenceServerClient(server.url("grpc")).infer("tinyconv", [tensor]).as_numpy("logits")
    np.testing.assert_array_equal(logits, np.zeros((2, 2), np.float32))
    load = run_load(server.url("grpc"), "tinyconv", {"image": frames[:1]}, requests=10, processes=1, threads=2,
                    transport="shm")
    assert (load.answered, load.failed) == (10, 0)


@pytest.mark.slow
def test_the_cuda_shared_memory_transport_without_a_gpu_fails_with_the_reason_and_leaves_nothing():
    import torch

    if torch.cuda.is_available():
        pytest.skip("checks the refusal on a machine without CUDA (tests/serve/test_gpu_inputs.py runs it on one)")
    with pytest.raises(RuntimeError, match=r"load clients \(cuda_shm\) could not start: RuntimeError: "
                                           r"transport cuda_shm needs a CUDA GPU"):
        run_load("127.0.0.1:1", "linear", {"x": np.ones((1, 4), np.float32)}, requests=2, processes=1, threads=1,
                 transport="cuda_shm")
