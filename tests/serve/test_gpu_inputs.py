"""Inputs in CUDA shared memory reach the Python backend on the GPU (DLPack, no host copy) and are
answered like the same inputs sent over gRPC (uploaded request by request into the batch on the
GPU) and like the route offline: on a real tritonserver with a GPU model instance.
GPU-only: skipped without CUDA; run on the H200 (docs/serving.md, "Inputs on the GPU")."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

import trtforge
from tests.serve.conftest import metric
from trtforge.core.sidecar import read_sidecar, write_sidecar
from trtforge.measure.routes import write_zoo_sidecar
from trtforge.measure.serving import CUDA_PREFIX, _release, _request, run_load

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (GPU-only test)")]


def lite0_sidecar(folder, max_batch: int = 8):
    path = write_zoo_sidecar(folder, "efficientnet_lite0")
    record = read_sidecar(path)
    first = record.inputs[0]
    dims = list(first.shape[1:])
    profile = {first.name: {"min": [1, *dims], "opt": [max_batch // 2, *dims], "max": [max_batch, *dims]}}
    path.unlink()
    return write_sidecar(path, dataclasses.replace(record, profiles=(profile,), path=None))


def test_inputs_in_cuda_shared_memory_are_taken_on_the_gpu_and_answered_like_host_inputs(start_server, tmp_path):
    from tritonclient.grpc import InferenceServerClient, InferInput

    sidecar = lite0_sidecar(tmp_path)
    record = read_sidecar(sidecar)
    spec, output = record.inputs[0], record.outputs[0].name
    server = start_server([sidecar], route="cuda_graph", devices=(0,), max_delay_ms=1)
    model = record.name
    x = np.random.default_rng(0).random((2, *spec.shape[1:])).astype(np.float32)
    tensor = InferInput(spec.name, list(x.shape), "FP32")
    tensor.set_data_from_numpy(x)
    host = InferenceServerClient(server.url("grpc")).infer(model, [tensor]).as_numpy(output)
    assert metric(server, "trtforge_gpu_input_rows", model) == 0  # gRPC bytes arrive on the host
    assert metric(server, "trtforge_dma_input_rows", model) == 2  # ... in Triton's shm, registered: one DMA

    regions: list = []
    try:
        client, tensors = _request(server.url("grpc"), {spec.name: x}, f"{CUDA_PREFIX}-test", regions)
        on_gpu = client.infer(model, tensors).as_numpy(output)
    finally:
        _release(regions)
    np.testing.assert_allclose(on_gpu, host, rtol=1e-4, atol=1e-4)
    assert np.abs(host).max() > 0  # a real model's logits, not zeros
    with trtforge.load(sidecar, route="cuda_graph", device="cuda:0") as engine:  # the route offline
        offline = engine(torch.from_numpy(x).cuda())[output].float().cpu().numpy()
    np.testing.assert_allclose(host, offline, rtol=2e-2, atol=2e-2)  # 2 rows padded to 4 when served
    np.testing.assert_array_equal(host.argmax(1), offline.argmax(1))
    assert metric(server, "trtforge_gpu_input_rows", model) == 2  # the DLPack path, not a host copy

    load = run_load(server.url("grpc"), model, {spec.name: x[:1]}, requests=40, processes=2, threads=2,
                    max_seconds=120, transport="cuda_shm")
    assert (load.answered, load.failed) == (40, 0), load
    assert metric(server, "trtforge_gpu_input_rows", model) == 42
    assert metric(server, "trtforge_dma_input_rows", model) == 2

    load = run_load(server.url("grpc"), model, {spec.name: x[:1]}, requests=40, processes=2, threads=2,
                    max_seconds=120, transport="shm")  # system shared memory: host rows, batched by DMA
    assert (load.answered, load.failed) == (40, 0), load
    assert metric(server, "trtforge_dma_input_rows", model) == 42
