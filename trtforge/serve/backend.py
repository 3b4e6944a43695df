"""The Python-backend model that Triton's stub runs: one artifact through a trtforge route.

``model.py`` in a generated repository imports ``TritonPythonModel`` from here. Its config's
parameters say what to serve: ``artifact`` (the sidecar, absolute or relative to the version
folder), ``route``, optionally ``fallback_route``, ``sha256`` (the engine's expected digest),
``allow_host_code``, ``engine_factory`` (``module:function`` taking ``(sidecar_path, route)``,
set only by the serving API, e.g. for test doubles), ``input_format`` (``uint8``: HWC frames through
``trtforge.serve.frames.FrameEngine``) and the health policy. An instance of ``KIND_GPU`` loads its
route on ``cuda:<model_instance_device_id>``; an engine that replays CUDA graphs is called only at
``graph_buckets`` sizes (the dynamic batcher's preferred sizes and the largest; padded, each
captured at load; the padding rows are counted in ``trtforge_padded_rows_total``).

Host inputs for an engine on a GPU are taken as views of Triton's shared memory (DLPack), which
``trtforge.serve.pinning`` registers with CUDA once, so each goes to the GPU by one DMA (counted in
``trtforge_dma_input_rows_total``). Inputs may arrive on the GPU (``FORCE_CPU_ONLY_INPUT_TENSORS: "no"``, e.g. from CUDA shared
memory): they are taken through DLPack without a host copy, and such a batch's outputs that the
engine leaves on the GPU go back through DLPack too. Health checks run on one worker thread and go
through the same per-engine lock as the batches (engines reuse their output buffers).

Loading verifies the engine's sha256 and warms the engine up; a failure raises, so Triton keeps
the model it had (hot swap) or reports the load error. Metrics are Triton custom metrics, on
Triton's own metrics endpoint.

Example (what Triton does):
    >>> model = TritonPythonModel(); model.initialize(args); model.execute(requests)
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np

from trtforge.core.errors import InvalidArgument
from trtforge.core.sidecar import read_sidecar
from trtforge.serve.batching import (
    BadRequest,
    check_request,
    gpu_rows,
    graph_buckets,
    max_shapes,
    run_together,
)
from trtforge.serve.health import FallbackState, HealthPolicy, HealthWorker
from trtforge.serve.pinning import HostRegistry


def _parameters(config: dict[str, Any]) -> dict[str, str]:
    return {k: v.get("string_value", "") for k, v in (config.get("parameters") or {}).items()}


def open_engine(sidecar: Path, route: str, parameters: dict[str, str], device: str | None = None) -> Any:
    """Verify the artifact and load it through ``route`` (or the configured engine factory)."""
    from trtforge.core.sidecar import read_sidecar

    record = read_sidecar(sidecar)
    record.verify_engine()
    expected = parameters.get("sha256")
    if expected and expected != record.engine_sha256:
        raise InvalidArgument(f"{sidecar} has engine sha256 {record.engine_sha256[:12]}…, the reload asked "
                              f"for {expected[:12]}…; refusing it")
    factory = parameters.get("engine_factory")
    if factory:
        module, _, function = factory.partition(":")
        return getattr(importlib.import_module(module), function)(sidecar, route)
    from trtforge.runtime.load import load, resolve_route, route_options

    route = resolve_route(record, route)  # "auto": the tuned record's route on this device model, else the default
    options: dict[str, Any] = route_options(route)  # check's graph: the artifact's precision, not the reference
    if route == "tensorrt":
        options["allow_host_code"] = parameters.get("allow_host_code") == "true"
    trust = parameters.get("trust_factory") == "true"
    if trust:  # serve --trust-factory: the sidecar's factory may be the user's module, from the server's folders
        sys.path.extend(p for p in parameters.get("factory_path", "").split(os.pathsep) if p and p not in sys.path)
    return load(sidecar, route=route, device=device, trust_factory=trust, **options)


def served_line(sidecar: Any, routes: tuple[str, str]) -> str:
    """What runs, for the log: ``"serves route onnxruntime on tiny_fp16.onnx"`` (and the fallback's).

    Example:
        >>> served_line(read_sidecar("out/tiny_fp16.json"), ("tensorrt", "onnxruntime"))
        'serves route tensorrt; fallback route onnxruntime on tiny_fp16.onnx'
    """
    from trtforge.runtime.load import route_graph

    parts = []
    for label, route in zip(("serves route", "fallback route"), routes, strict=True):
        if route:
            graph = route_graph(sidecar, route)
            parts.append(f"{label} {route}" + (f" on {graph}" if graph else ""))
    return "; ".join(parts)


def warm_input(engine: Any) -> tuple[np.ndarray, ...]:
    """One row of zeros per input, dynamic dims at the profile's opt size (or 1)."""
    from trtforge.runtime.protocol import ProfiledEngine

    profiles = engine.profiles if isinstance(engine, ProfiledEngine) else ()
    profile = profiles[0] if profiles else {}
    arrays = []
    for spec in engine.inputs:
        opt = profile.get(spec.name, {}).get("opt")
        shape = [d if d > 0 else (opt[i] if opt else 1) for i, d in enumerate(spec.shape)]
        if spec.shape and spec.shape[0] < 0:
            shape[0] = 1
        arrays.append(np.zeros(shape, dtype=spec.dtype))
    return tuple(arrays)


class OneHot:
    """A gauge family where one label set is 1 and the ones before it 0 (the active route, the reason)."""

    def __init__(self, family: Any, labels: dict[str, str]) -> None:
        self.family, self.labels, self.metrics = family, labels, {}

    def select(self, **labels: str) -> None:
        for metric in self.metrics.values():
            metric.set(0)
        key = tuple(sorted(labels.items()))
        if key not in self.metrics:
            self.metrics[key] = self.family.Metric(labels={**self.labels, **labels})
        self.metrics[key].set(1)


def instance_device(kind: str, device_id: int | str) -> str | None:
    """The torch device of one Triton model instance: ``cuda:<id>`` for KIND_GPU, else None (CPU).

    Example:
        >>> instance_device("GPU", 1), instance_device("CPU", 0)
        ('cuda:1', None)
    """
    return f"cuda:{int(device_id)}" if kind == "GPU" else None


class Metrics:
    """Our Triton custom metrics for one model instance (labels: model, device): active route, degraded
    and why, fallbacks, health-check failures, engine calls and rows."""

    def __init__(self, pb_utils: Any, model: str, device: str = "cpu") -> None:
        family = pb_utils.MetricFamily
        self.labels = {"model": model, "device": device}
        self.route = OneHot(family("trtforge_active_route", "1 for the route serving now (labels: route, sha256)",
                                   family.GAUGE), self.labels)
        self.reason = OneHot(family("trtforge_degraded_reason", "1 for why the fallback serves (label: reason)",
                                    family.GAUGE), self.labels)
        self._degraded = family("trtforge_degraded", "1 while the fallback route serves", family.GAUGE)
        self._fallbacks = family("trtforge_fallbacks_total", "switches to the fallback route", family.COUNTER)
        self._failures = family("trtforge_health_failures_total", "failed health checks", family.COUNTER)
        self._calls = family("trtforge_model_calls_total", "engine calls (one per formed batch)", family.COUNTER)
        self._rows = family("trtforge_model_rows_total", "rows (images) the engine ran", family.COUNTER)
        self._padded = family("trtforge_padded_rows_total", "zero rows added to reach a captured batch size",
                              family.COUNTER)
        self._gpu_rows = family("trtforge_gpu_input_rows_total", "rows whose inputs arrived in GPU memory "
                                "(CUDA shared memory, taken through DLPack)", family.COUNTER)
        self._dma_rows = family("trtforge_dma_input_rows_total", "host rows copied to the GPU by one DMA "
                                "from Triton's page-locked shared memory", family.COUNTER)
        self.degraded = self._degraded.Metric(labels=self.labels)
        self.fallbacks = self._fallbacks.Metric(labels=self.labels)
        self.failures = self._failures.Metric(labels=self.labels)
        self.calls = self._calls.Metric(labels=self.labels)
        self.rows = self._rows.Metric(labels=self.labels)
        self.padded = self._padded.Metric(labels=self.labels)
        self.gpu_rows = self._gpu_rows.Metric(labels=self.labels)
        self.dma_rows = self._dma_rows.Metric(labels=self.labels)

    def set_route(self, route: str, sha256: str) -> None:
        self.route.select(route=route, sha256=sha256)

    def set_degraded(self, reason: str) -> None:
        """Degraded with ``reason`` (first 200 characters), or healthy when ``reason`` is empty."""
        self.degraded.set(1 if reason else 0)
        self.reason.select(reason=reason[:200].replace("\"", "'").replace("\\", "/").replace("\n", " "))


def _array(tensor: Any, alias: bool = False) -> Any:
    """A Triton input as NumPy (host) or, when it arrived on the GPU, a torch tensor through DLPack.

    ``alias``: a host input as a NumPy view of Triton's shared memory (through DLPack) rather than
    the stub's own copy of it, so that it can go to the GPU by one DMA (``trtforge.serve.pinning``)."""
    if tensor.is_cpu() and not alias:
        return tensor.as_numpy()
    import torch

    view = torch.from_dlpack(tensor.to_dlpack())
    return view.numpy() if tensor.is_cpu() else view


def _tensor(pb: Any, name: str, value: Any) -> Any:
    """An output for Triton: NumPy as it is, a torch tensor (on the GPU) through DLPack."""
    return pb.Tensor(name, value) if isinstance(value, np.ndarray) else pb.Tensor.from_dlpack(name, value)


class TritonPythonModel:
    """Triton's Python-backend entry points: initialize, execute, finalize."""

    def initialize(self, args: dict[str, Any]) -> None:
        import triton_python_backend_utils as pb_utils

        self.pb = pb_utils
        config = json.loads(args["model_config"])
        params = _parameters(config)
        if params.get("trtforge_path") and params["trtforge_path"] not in sys.path:
            sys.path.insert(0, params["trtforge_path"])
        sidecar = Path(params["artifact"])
        if not sidecar.is_absolute():
            sidecar = Path(args["model_repository"]) / args["model_version"] / sidecar
        self.name, self.max_batch = config["name"], int(config.get("max_batch_size", 0))
        self.preferred = tuple(int(b) for b in (config.get("dynamic_batching") or {}).get("preferred_batch_size", ()))
        self.policy = HealthPolicy(**{k: float(params[k]) if k.endswith("_s") else int(params[k])
                                      for k in ("interval_s", "timeout_s", "fallback_after", "recover_after")
                                      if k in params})
        device = instance_device(args.get("model_instance_kind", ""), args.get("model_instance_device_id", 0))
        self.buckets: dict[int, tuple[int, ...]] = {}
        self.locks: dict[int, threading.Lock] = {}  # engines reuse output buffers: one call at a time per engine
        self.primary = self._open(sidecar, params.get("route", "onnxruntime"), params, device)
        self.fallback = None
        if params.get("fallback_route"):
            self.fallback = self._open(sidecar, params["fallback_route"], params, device)
        self.routes = (params.get("route", "onnxruntime"), params.get("fallback_route", ""))
        pb_utils.Logger.log_info(f"trtforge: {self.name} " + served_line(read_sidecar(sidecar), self.routes))
        from trtforge.runtime.protocol import ProfiledEngine

        self.limits = max_shapes((self.primary.profiles if isinstance(self.primary, ProfiledEngine) else ()) or ())
        self.sha256 = read_sidecar(sidecar).engine_sha256
        self.state = FallbackState(self.policy)
        self.metrics = Metrics(pb_utils, self.name, device or "cpu")
        self.registry = HostRegistry() if device else None  # host inputs to the GPU by DMA
        self._dma_rows = 0
        self.metrics.set_route(self.routes[0], self.sha256)
        self._stop = threading.Event()
        self._worker: HealthWorker | None = None
        if self.fallback is not None:
            self._worker = HealthWorker()
            threading.Thread(target=self._health_loop, daemon=True, name="trtforge-health").start()

    def _open(self, sidecar: Path, route: str, params: dict[str, str], device: str | None) -> Any:
        """Open ``route`` (taking uint8 frames when the input format says so) and warm it up; an engine
        that replays CUDA graphs is captured at every bucket size it will be called with."""
        engine = open_engine(sidecar, route, params, device)
        if params.get("input_format", "native") == "uint8":
            from trtforge.core.sidecar import read_sidecar
            from trtforge.serve.frames import FrameEngine

            engine = FrameEngine(engine, read_sidecar(sidecar))
        from trtforge.runtime.protocol import ReplayingEngine

        replays = isinstance(engine, ReplayingEngine) and engine.cuda_graph
        buckets = graph_buckets(self.max_batch, self.preferred) if replays else ()
        self.buckets[id(engine)] = buckets
        self.locks[id(engine)] = threading.Lock()
        for rows in sorted(buckets or (1,), reverse=True):  # largest first: buffers sized once
            engine(*(np.repeat(a, rows, axis=0) if self.max_batch > 0 else a for a in warm_input(engine)))
        return engine

    def _active(self) -> Any:
        return self.fallback if self.state.degraded and self.fallback is not None else self.primary

    def _health_check(self, warm: tuple[np.ndarray, ...]) -> None:
        with self.locks[id(self.primary)]:  # never while a batch's outputs are still to be copied
            self.primary(*warm)

    def _health_loop(self) -> None:
        rows = min(self.buckets[id(self.primary)] or (1,))  # a captured size: a check never captures a graph
        warm = tuple(np.repeat(a, rows, axis=0) if self.max_batch > 0 else a for a in warm_input(self.primary))
        while not self._stop.wait(self.policy.interval_s):
            reason = self._worker.check(lambda: self._health_check(warm), self.policy.timeout_s)
            if reason:
                self.metrics.failures.increment(1)
            if self.state.record(not reason, reason):
                degraded = self.state.degraded
                self.metrics.set_degraded(reason if degraded else "")
                if degraded:
                    self.metrics.fallbacks.increment(1)
                self.metrics.set_route(self.routes[1] if degraded else self.routes[0], self.sha256)
                self.pb.Logger.log_warn(f"trtforge: {self.name} " + (
                    f"degraded, serving {self.routes[1]}: {reason}" if degraded else f"recovered, serving {self.routes[0]}"))

    def execute(self, requests: list[Any]) -> list[Any]:
        pb = self.pb
        responses: list[Any] = [None] * len(requests)
        good, checked = [], []
        names = [s.name for s in self.primary.inputs]
        from trtforge.runtime.protocol import JoiningEngine

        alias = self.registry is not None and not isinstance(self._active(), JoiningEngine)
        for i, request in enumerate(requests):
            try:
                tensors = {n: pb.get_input_tensor_by_name(request, n) for n in names}
                arrays = {n: _array(t, alias) for n, t in tensors.items() if t is not None}
                checked.append(check_request(self.primary.inputs, arrays, self.max_batch, self.limits))
                good.append(i)
            except BadRequest as exc:
                responses[i] = pb.InferenceResponse(error=pb.TritonError(str(exc)))
        if good:
            self._run(good, checked, responses)
        return responses

    def _pin(self, array: np.ndarray) -> bool:
        """Whether ``array`` may go to the GPU by one DMA (counted for ``trtforge_dma_input_rows_total``)."""
        if self.registry is None or not self.registry.pinned(array):
            return False
        self._dma_rows += len(array)
        return True

    def _run(self, good: list[int], checked: list[Any], responses: list[Any]) -> None:
        pb = self.pb
        engine = self._active()
        self._dma_rows = 0
        output_names = [s.name for s in engine.outputs]
        try:
            with self.locks[id(engine)]:  # engines reuse output buffers: one call at a time per engine
                results, padded = run_together(engine, checked, output_names, self.max_batch > 0,
                                               self.buckets[id(engine)], with_padding=True, pin=self._pin)
            self.metrics.calls.increment(1)
            self.metrics.rows.increment(sum(c.rows for c in checked))
            if padded:
                self.metrics.padded.increment(padded)
            on_gpu = gpu_rows(checked)
            if on_gpu:
                self.metrics.gpu_rows.increment(on_gpu)
            if self._dma_rows:
                self.metrics.dma_rows.increment(self._dma_rows)
        except Exception as exc:  # an engine failure fails this batch's requests, with the reason
            message = f"{self.name}: inference failed on route {engine.route}: {type(exc).__name__}: {exc}"
            for i in good:
                responses[i] = pb.InferenceResponse(error=pb.TritonError(message))
            return
        for i, result in zip(good, results, strict=True):
            responses[i] = pb.InferenceResponse([_tensor(pb, n, v) for n, v in result.items()])

    def finalize(self) -> None:
        self._stop.set()
        if self._worker is not None:
            self._worker.stop()
        for engine in (self.primary, self.fallback):
            if engine is not None:
                engine.close()
