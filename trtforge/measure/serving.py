"""Serving benchmark parts: a null engine (the serving path's own ceiling) and a bounded gRPC load.

The load runs in ``processes`` client processes with ``threads`` synchronous gRPC clients each
(``processes × threads`` requests in flight), on loopback, until ``requests`` are answered or
``max_seconds`` pass, whichever comes first. ``transport="shm"`` puts each client's inputs in a
Triton system shared-memory region (registered once, ``tritonclient.utils.shared_memory``): the
gRPC message then carries only the region's name, not the tensor bytes (local clients only).
``transport="cuda_shm"`` puts them in GPU memory of device 0 instead, shared with Triton through a
CUDA IPC handle (``DeviceRegion``): the Python backend then receives them on the GPU and takes them
through DLPack (``FORCE_CPU_ONLY_INPUT_TENSORS: "no"``), with no host copy on the server's side.

Example:
    >>> load = run_load("127.0.0.1:8001", "lite0", {"images": frame}, requests=2000, processes=4, threads=16)
    >>> load.throughput, load.p99_ms
"""

from __future__ import annotations

import multiprocessing
import queue
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from trtforge.core.sidecar import read_sidecar
from trtforge.runtime.protocol import EngineBase


class NullEngine(EngineBase):
    """Zeros of the artifact's output shapes, without running a model: what serving costs alone."""

    route = "null"
    skips_preprocessing = True  # with uint8 frames it takes them as they are: the serving path alone

    def __init__(self, sidecar: Path, route: str = "null") -> None:
        record = read_sidecar(sidecar)
        self.inputs, self.outputs, self.profiles = record.inputs, record.outputs, record.profiles

    @property
    def device(self) -> str:
        return "cpu"

    def __call__(self, *tensors: Any, **named: Any) -> dict[str, np.ndarray]:
        rows = len(tensors[0]) if tensors else 1
        return {s.name: np.zeros((rows, *[max(d, 1) for d in s.shape[1:]]), dtype=s.dtype) for s in self.outputs}


def null_engine(sidecar: Path, route: str) -> NullEngine:
    """Engine factory for ``ServeConfig(engine_factory="trtforge.measure.serving:null_engine")``."""
    return NullEngine(sidecar, route)


@dataclass(frozen=True)
class LoadResult:
    """Requests answered, failures, wall seconds and latency percentiles (ms) of one load run."""

    answered: int
    failed: int
    seconds: float
    p50_ms: float
    p99_ms: float
    in_flight: int

    @property
    def throughput(self) -> float:
        return self.answered / self.seconds if self.seconds > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"answered": self.answered, "failed": self.failed, "seconds": self.seconds, "p50_ms": self.p50_ms,
                "p99_ms": self.p99_ms, "in_flight": self.in_flight, "throughput": self.throughput}


#: Region names of the CUDA shared-memory transport start with this.
CUDA_PREFIX = "trtforge-load-cuda"

#: How a load client sends its inputs: in the gRPC message, through system shared memory, or
#: through CUDA shared memory (a GPU allocation the server opens by its IPC handle).
TRANSPORTS: tuple[str, ...] = ("grpc", "shm", "cuda_shm")


class DeviceRegion:
    """One input's bytes in a CUDA allocation, with the base64 IPC handle that Triton's
    ``register_cuda_shared_memory`` takes. The CUDA runtime is called through ctypes (the library
    torch loaded), so the load clients need no CUDA Python package."""

    #: ``sizeof(cudaIpcMemHandle_t)``; ``cudaMemcpyHostToDevice``.
    HANDLE_BYTES, HOST_TO_DEVICE = 64, 1

    def __init__(self, value: np.ndarray, device_id: int = 0) -> None:
        import base64
        import ctypes

        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("transport cuda_shm needs a CUDA GPU beside the server; use shm or grpc here")
        torch.cuda.init()
        from trtforge.runtime.staging import libcudart

        host = np.ascontiguousarray(value)
        self.cuda, self.device_id, self.nbytes = libcudart(), device_id, host.nbytes
        self.pointer = ctypes.c_void_p()
        self._check(self.cuda.cudaSetDevice(device_id), "cudaSetDevice")
        self._check(self.cuda.cudaMalloc(ctypes.byref(self.pointer), ctypes.c_size_t(self.nbytes)), "cudaMalloc")
        handle = (ctypes.c_char * self.HANDLE_BYTES)()
        try:
            self._check(self.cuda.cudaMemcpy(self.pointer, ctypes.c_void_p(host.ctypes.data),
                                             ctypes.c_size_t(self.nbytes), self.HOST_TO_DEVICE), "cudaMemcpy")
            self._check(self.cuda.cudaIpcGetMemHandle(handle, self.pointer), "cudaIpcGetMemHandle")
        except RuntimeError:
            self.free()
            raise
        self.raw_handle = base64.b64encode(bytes(handle))

    @staticmethod
    def _check(code: int, call: str) -> None:
        if code:
            raise RuntimeError(f"{call} failed with CUDA error {code}")

    def free(self) -> None:
        if self.pointer.value:
            self.cuda.cudaFree(self.pointer)
            self.pointer.value = None


def _request(url: str, inputs: dict[str, np.ndarray], shm_prefix: str | None, regions: list) -> tuple[Any, list[Any]]:
    """(client, prepared inputs) for one load thread; shared-memory regions it makes go into ``regions``
    (the caller releases them, also when this fails half way)."""
    from tritonclient.grpc import InferenceServerClient, InferInput
    from tritonclient.utils import np_to_triton_dtype

    client, tensors = InferenceServerClient(url), []
    for i, (name, value) in enumerate(inputs.items()):
        tensor = InferInput(name, list(value.shape), np_to_triton_dtype(value.dtype))
        if shm_prefix is None:
            tensor.set_data_from_numpy(value)
        elif shm_prefix.startswith(CUDA_PREFIX):
            region = f"{shm_prefix}-{i}"
            device = DeviceRegion(value)
            regions.append((client, region, device))
            client.register_cuda_shared_memory(region, device.raw_handle, device.device_id, device.nbytes)
            tensor.set_shared_memory(region, device.nbytes)
        else:
            import tritonclient.utils.shared_memory as shm

            region = f"{shm_prefix}-{i}"
            handle = shm.create_shared_memory_region(region, f"/{region}", value.nbytes)
            regions.append((client, region, handle))
            shm.set_shared_memory_region(handle, [np.ascontiguousarray(value)])
            client.register_system_shared_memory(region, f"/{region}", value.nbytes)
            tensor.set_shared_memory(region, value.nbytes)
        tensors.append(tensor)
    return client, tensors


def _release(regions: list) -> None:
    """Unregister (where the server still answers) and destroy every region a load thread made."""
    import tritonclient.utils.shared_memory as shm
    from tritonclient.utils import InferenceServerException

    for client, region, handle in regions:
        device = isinstance(handle, DeviceRegion)
        try:
            (client.unregister_cuda_shared_memory if device else client.unregister_system_shared_memory)(region)
        except InferenceServerException as exc:  # never registered, or the server is gone: destroy it anyway
            print(f"shared memory {region}: not unregistered ({exc})")
        if device:
            handle.free()
        else:
            shm.destroy_shared_memory_region(handle)


def _client_process(url: str, model: str, inputs: dict[str, np.ndarray], count: int, threads: int,
                    max_seconds: float, barrier: Any, results: Any, transport: str = "grpc") -> None:
    import os

    latencies: list[float] = []
    failed = [0]
    lock = threading.Lock()
    prefix = {"shm": "trtforge-load", "cuda_shm": CUDA_PREFIX}.get(transport)
    prefix = prefix and f"{prefix}-{os.getpid()}"
    prepared, regions = [], []
    try:
        for t in range(threads):
            prepared.append(_request(url, inputs, prefix and f"{prefix}-{t}", regions))
    except Exception as exc:  # e.g. /dev/shm too small: the run fails with the reason, nothing hangs
        _release(regions)
        results.put(f"{type(exc).__name__}: {exc}")
        barrier.abort()
        return

    def worker(share: int, client: Any, tensors: list[Any]) -> None:
        for _ in range(share):
            if time.time() > deadline:
                return
            start = time.perf_counter()
            try:
                client.infer(model, tensors, client_timeout=60)
            except Exception:  # a failed request is counted, and the load goes on
                with lock:
                    failed[0] += 1
                continue
            with lock:
                latencies.append((time.perf_counter() - start) * 1000)

    pool = [threading.Thread(target=worker, args=(count // threads + (i < count % threads), *prepared[i]))
            for i in range(threads)]
    try:
        barrier.wait(timeout=120)  # every client process is ready: the clock starts now
    except threading.BrokenBarrierError:  # another client could not start: release ours and leave
        _release(regions)
        return
    deadline = time.time() + max_seconds
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    _release(regions)
    results.put((latencies, failed[0]))


def run_load(url: str, model: str, inputs: dict[str, np.ndarray], *, requests: int, processes: int,
             threads: int, max_seconds: float = 120.0, transport: str = "grpc") -> LoadResult:
    """Send ``requests`` (bounded by ``max_seconds``) from ``processes × threads`` clients; wait for all."""
    if transport not in TRANSPORTS:
        raise ValueError(f"transport {transport!r} is not one of {TRANSPORTS}")
    context = multiprocessing.get_context("spawn")
    results, barrier = context.Queue(), context.Barrier(processes + 1)
    share = [requests // processes + (i < requests % processes) for i in range(processes)]
    workers = [context.Process(target=_client_process,
                               args=(url, model, inputs, s, threads, max_seconds, barrier, results, transport))
               for s in share]
    for w in workers:
        w.start()
    try:
        barrier.wait(timeout=120)
    except threading.BrokenBarrierError:
        try:
            reason = results.get(timeout=10)
        except queue.Empty:
            reason = "a client process did not start in 120 s"
        for w in workers:
            w.join(timeout=30)
        raise RuntimeError(f"load clients ({transport}) could not start: {reason}") from None
    start = time.perf_counter()
    latencies, failed = [], 0
    for _ in workers:
        got, bad = results.get(timeout=max_seconds + 120)
        latencies += got
        failed += bad
    seconds = time.perf_counter() - start
    for w in workers:
        w.join(timeout=30)
    a = np.asarray(latencies or [float("nan")])
    return LoadResult(len(latencies), failed, seconds, float(np.percentile(a, 50)), float(np.percentile(a, 99)),
                      processes * threads)
