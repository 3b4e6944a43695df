"""The TensorRT route: a verified engine file, run with the named-tensor API on the caller's stream.

How a call runs:

- inputs are checked (rank, dtype, device, contiguity) and bound by pointer, no copies; numpy
  arrays and CPU tensors are copied to the engine's device first, explicitly;
- the input shapes choose the optimization profile (smallest maximum batch that holds them);
  shapes outside every profile are refused with the allowed ranges in the message;
- every profile has its own execution context, created on first use, with its outputs
  preallocated at the profile's maximum shapes; a call returns views of them trimmed to the
  real output shapes (valid until the next call: ``clone()`` to keep);
- ``set_input_shape`` runs only when an input's shape changed since the last call on that context;
- a shape-tensor input (``ICudaEngine.is_shape_inference_io``: its values set shapes, e.g. a
  Reshape's shape) lives in host memory, as TensorRT requires: its values (a list, a numpy array,
  or a torch tensor on any device; left out, the values the sidecar records) are written into a
  host buffer the context owns, bound by ``set_tensor_address``; values outside the profile's
  range (``get_tensor_profile_values``) are refused before TensorRT runs;
- every context calls ``set_optimization_profile_async(profile, stream)`` once when it is created,
  profile 0 included (TensorRT selects profile 0 implicitly for the FIRST context only), and sets
  its shapes after;
- streams, as Torch-TensorRT and Polygraphy do it: each context runs on a stream the route owns, on
  the engine's GPU (``stream=`` names one instead), never on the legacy default stream, where
  TensorRT synchronizes more and whole-graph capture fails. A call orders that stream after the
  work already queued on the caller's current stream, and the caller's stream after the engine's,
  with events (``wait_stream``): results are ready for whatever the caller queues next, and nothing
  synchronizes the host;
- with ``cuda_graph=True`` a call is captured once per binding set (profile, shapes, input
  addresses), on the context's stream, and replayed after; it pays off when callers reuse their
  input buffers (at most 16 binding sets are kept, least recently used dropped);
- failures TensorRT reports (a deserialize, a profile, a shape or an enqueue it refuses) raise
  ``TensorRTRuntimeError`` or ``EngineLoadError`` (user errors: the GPU, the driver or the engine),
  quoting TensorRT's last error lines (``trtforge.core.trt_log``) and naming the next step;
- where the flavour offers ``ICudaEngine.create_runtime_config`` (TensorRT-RTX), every context is
  created from one runtime config: ``cuda_graph=True`` sets its ``cuda_graph_strategy`` to
  ``WHOLE_GRAPH_CAPTURE`` (the runtime captures and replays itself, instead of our capture), and
  ``runtime_cache=`` (a ``trtforge.cache.runtime_cache.RuntimeCacheStore``) loads the kernels its
  JIT compiled in an earlier process and stores them again on ``close()``, so a second process skips
  the compilation; everything found by hasattr;
- ``capturable_forward`` (the ``CapturableEngine`` protocol) binds tensors the caller already
  holds in the engine's input format and enqueues on the caller's current stream (the one an outer
  capture records), with no copy or check
  that would break a capture: the predictor captures preprocessing, the engine and decoding as
  one CUDA graph around it. TensorRT supports capturing ``enqueueV3`` in a CUDA graph once a call
  with the same shapes has run (the capture's warm-up calls are that run).

Devices: the engine runs on ``device`` (default: the current GPU). TensorRT binds an engine to the
device current when it is deserialized, so the route makes its GPU current (cudaSetDevice through
``torch.cuda.device``, the previous device restored after) around deserializing, creating contexts
and every ``execute_async_v3``; its streams, output buffers and graphs are that GPU's. Inputs on
another GPU are refused (``move_inputs=True`` copies them; see ``trtforge.runtime.placement``).

The real TensorRT bindings run on a CUDA device only. ``bindings=`` injects another module with
TensorRT's runtime API; the engine then runs on whatever ``device`` the caller names (the test
double works on host memory), and ``devices=`` another ``DeviceRuntime`` (the double's current
CUDA device and streams).

Threads: one lock per engine guards the contexts, so calls from several threads are safe and run
one at a time (a context per thread would multiply activation memory; run one engine per thread
for parallel streams).

Engines that embed host code are refused unless ``allow_host_code=True``.

Example:
    >>> engine = TensorRTEngine("out/efficientnet_lite0_fp16.engine", device="cuda:0")
    >>> engine(torch.rand(4, 3, 224, 224, device="cuda"))["logits"].shape
    torch.Size([4, 1000])
"""

from __future__ import annotations

import contextlib
import math
import threading
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

import numpy as np
import torch

from trtforge.core import trt as trt_shim
from trtforge.core import trt_log
from trtforge.core.errors import (
    InternalError,
    InvalidArgument,
    MissingDependency,
    NotPermitted,
    Unsupported,
    WrongType,
)
from trtforge.core.sidecar import Sidecar, read_sidecar
from trtforge.core.specs import TensorSpec
from trtforge.runtime.cuda_graph import GraphCache
from trtforge.runtime.placement import TORCH_CUDA, DeviceRuntime, default_device
from trtforge.runtime.profiles import check_shape_values, choose_profile, max_shapes
from trtforge.runtime.protocol import EngineBase, EngineInputError
from trtforge.runtime.tensors import BINDABLE_DTYPES, bind_inputs, torch_dtype


class RuntimeCacheStore(Protocol):
    """Where the route keeps JIT runtime-cache blobs (``trtforge.cache.runtime_cache.RuntimeCacheStore``)."""

    def load(self, engine_sha256: str, gpu: str, flavour: str) -> bytes | None: ...

    def save(self, blob: bytes, engine_sha256: str, gpu: str, flavour: str) -> Any: ...

class HostCodeRefused(NotPermitted):
    """The engine embeds host code and the caller did not allow it."""


class EngineLoadError(Unsupported):
    """TensorRT could not deserialize the engine here (another GPU or TensorRT version)."""


class TensorRTRuntimeError(Unsupported):
    """TensorRT refused a call on this GPU (a profile, a shape, an enqueue) that the route had checked
    what it could of: the message quotes TensorRT's last error lines and names the next step."""


def tensorrt_said(mark: int, limit: int = 3) -> str:
    """TensorRT's distinct error lines logged since ``mark`` (the first line of each, the last
    ``limit``), joined for one message; what to say when it logged none."""
    lines = list(dict.fromkeys(m.strip().splitlines()[0] for m in trt_log.recent_errors(mark) if m.strip()))
    return " | ".join(lines[-limit:]) if lines else "TensorRT logged no error (run with TensorRT's INFO log for more)"


@dataclass
class _ContextState:
    """One execution context, fixed to one profile, with its preallocated outputs."""

    context: Any
    profile: int
    #: The stream this context runs on (None on an injected CPU device: handle 0).
    stream: Any = None
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    addresses: dict[str, int] = field(default_factory=dict)
    buffers: dict[str, torch.Tensor] = field(default_factory=dict)
    graphs: GraphCache | None = None
    #: Host buffers of the shape-tensor inputs (TensorRT reads their values on the host).
    host_values: dict[str, torch.Tensor] = field(default_factory=dict)


def _place(device: Any, injected: bool, devices: DeviceRuntime, name: str) -> tuple[torch.device, int | None]:
    """(where the engine's tensors live, its CUDA device index or None) for ``device`` as asked.

    Real bindings need a GPU; injected ones (the test double) may run on the CPU, or on a GPU index
    of an injected ``DeviceRuntime`` whose tensors live in host memory.
    """
    target = "cuda" if device is None else device
    if (isinstance(target, int) or str(target).startswith("cuda")) and devices.count() == 0:
        raise MissingDependency(
            f"the TensorRT route runs {name} on a CUDA GPU, and this machine has none that torch "
            "can use (torch.cuda.is_available() is False); use route='onnxruntime' or route='eager' here")
    target = default_device(target, devices)
    if target.type == "cuda":
        return devices.memory(target.index), target.index
    if not injected:  # injected bindings choose their memory
        raise InvalidArgument(
            f"the TensorRT route needs a CUDA device, got {target}; use route='onnxruntime' "
            "or route='eager' on a machine without a GPU"
        )
    return target, None


class TensorRTEngine(EngineBase):
    """A TensorRT engine behind the ``Engine`` protocol (see the module docstring)."""

    route = "tensorrt"

    def __init__(
        self,
        path: str | Path,
        device: str | torch.device | None = None,
        *,
        cuda_graph: bool = False,
        allow_host_code: bool = False,
        bindings: ModuleType | None = None,
        sidecar: Sidecar | None = None,
        runtime_cache: RuntimeCacheStore | None = None,
        move_inputs: bool = False,
        devices: DeviceRuntime | None = None,
        stream: Any = None,
    ) -> None:
        self.sidecar = sidecar if sidecar is not None else read_sidecar(Path(path))
        self._devices = devices if devices is not None else TORCH_CUDA
        # What the artifact is refused for comes first (the sidecar says it, on any machine), then
        # the device (a GPU this machine lacks is refused before the engine is read), then the bytes.
        if self.sidecar.builder.host_code and not allow_host_code:
            raise HostCodeRefused(
                f"{self.sidecar.engine_path} embeds host code (sidecar builder.host_code=true), which runs on "
                "this machine when the engine loads. Load it with allow_host_code=True only if you "
                "trust where it came from"
            )
        self._device, self.gpu = _place(device, bindings is not None, self._devices, self.sidecar.engine_path.name)
        engine_path = self.sidecar.verify_engine()  # refuse changed bytes before deserializing
        trt = bindings if bindings is not None else trt_shim.bindings()
        self._trt = trt
        self.move_inputs = move_inputs
        self.cuda_graph = cuda_graph and self.gpu is not None
        if stream is not None and self.gpu is None:
            raise InvalidArgument(f"stream= needs the engine on a CUDA device, not {self._device}; leave it out")
        self._stream = stream
        self._lock = threading.Lock()
        # TensorRT binds an engine to the device current when it is deserialized: make it ours.
        self._logger = trt_log.process_logger(trt)  # TensorRT's errors reach logging and our messages
        mark = trt_log.mark_recent()
        with self._device_guard():
            self._runtime = trt.Runtime(self._logger)
            if hasattr(self._runtime, "engine_host_code_allowed"):
                self._runtime.engine_host_code_allowed = bool(allow_host_code)
            self._engine = self._runtime.deserialize_cuda_engine(engine_path.read_bytes())
        if self._engine is None:
            built = self.sidecar.builder
            raise EngineLoadError(
                f"TensorRT could not deserialize {engine_path} ({built.flavour} {built.version}, targets "
                f"{list(built.targets)}): {tensorrt_said(mark)}. Run trtforge doctor {self.sidecar.engine_path.with_suffix('.json')} "
                "to see whether it can run here; else rebuild it on this machine with trtforge build"
            )
        self.inputs, self.outputs = self._read_io()
        self.profiles = self._read_profiles()
        #: Inputs TensorRT reads on the host as shape tensors, and their (min, opt, max) values per profile.
        self.shape_inputs = tuple(s.name for s in self.inputs if self._engine.is_shape_inference_io(s.name))
        self._value_ranges = self._read_value_ranges()
        self._contexts: dict[int, _ContextState] = {}
        with self._device_guard():  # the runtime's own graphs need a GPU stream to capture on
            self._configure_runtime(cuda_graph and self.gpu is not None, runtime_cache)

    # -- TensorRT-RTX runtime config -----------------------------------------------------------
    def _configure_runtime(self, cuda_graph: bool, store: RuntimeCacheStore | None) -> None:
        """Where the flavour offers ``create_runtime_config`` (TensorRT-RTX): one config for every
        context, with the runtime's own CUDA-graph strategy for ``cuda_graph=True`` and the JIT
        runtime cache from ``store``. Found by hasattr; other flavours keep plain contexts."""
        self._runtime_config = self._runtime_cache = self._store = None
        self.native_cuda_graph = self.runtime_cache_loaded = False
        create = getattr(self._engine, "create_runtime_config", None)
        if create is None:
            return
        config = create()
        strategy = getattr(self._trt, "CudaGraphStrategy", None)
        if cuda_graph and strategy is not None and hasattr(config, "cuda_graph_strategy"):
            config.cuda_graph_strategy = strategy.WHOLE_GRAPH_CAPTURE  # the runtime captures and replays
            self.native_cuda_graph = True
        if store is not None and hasattr(config, "create_runtime_cache"):
            cache = config.create_runtime_cache()
            blob = store.load(**self.runtime_cache_facts())
            # deserialize checks the blob against this engine, GPU and release; False leaves it empty.
            self.runtime_cache_loaded = bool(blob) and bool(cache.deserialize(blob))
            config.set_runtime_cache(cache)
            self._runtime_cache, self._store = cache, store
        self._runtime_config = config

    def runtime_cache_facts(self) -> dict[str, str]:
        """What a runtime-cache blob depends on: this engine's sha256, the GPU, the flavour and version."""
        if self._device.type == "cuda":
            major, minor = torch.cuda.get_device_capability(self._device)
            gpu = f"{torch.cuda.get_device_name(self._device)} sm{major}{minor}"
        else:
            gpu = str(self._device)
        flavour = f"{self._trt.__name__} {getattr(self._trt, '__version__', 'unknown')}"
        return {"engine_sha256": self.sidecar.engine_sha256, "gpu": gpu, "flavour": flavour}

    def save_runtime_cache(self) -> bool:
        """Store the kernels the runtime compiled so far (``close()`` does this); True when stored."""
        if self._runtime_cache is None or self._store is None:
            return False
        blob = bytes(memoryview(self._runtime_cache.serialize()))
        return bool(blob) and self._store.save(blob, **self.runtime_cache_facts()) is not None

    # -- reading the engine ---------------------------------------------------------------
    def _read_io(self) -> tuple[tuple[TensorSpec, ...], tuple[TensorSpec, ...]]:
        trt, engine = self._trt, self._engine
        inputs, outputs = [], []
        for i in range(engine.num_io_tensors):
            name = engine.get_tensor_name(i)
            dtype = trt_shim.dtype_name(engine.get_tensor_dtype(name))
            if dtype not in BINDABLE_DTYPES:
                raise WrongType(f"engine tensor {name!r} has type {dtype}, which this route cannot bind; "
                                "rebuild it with float, integer or bool I/O")
            spec = TensorSpec(name, dtype, tuple(int(d) for d in engine.get_tensor_shape(name)))
            is_input = engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT
            (inputs if is_input else outputs).append(spec)
        return tuple(inputs), tuple(outputs)

    def _read_profiles(self) -> tuple[dict[str, dict[str, list[int]]], ...]:
        profiles = []
        for index in range(self._engine.num_optimization_profiles):
            profile = {}
            for spec in self.inputs:
                lo, opt, hi = self._engine.get_tensor_profile_shape(spec.name, index)
                profile[spec.name] = {"min": [int(d) for d in lo], "opt": [int(d) for d in opt],
                                      "max": [int(d) for d in hi]}
            profiles.append(profile)
        return tuple(profiles)

    def _read_value_ranges(self) -> tuple[dict[str, tuple[tuple[int, ...], ...]], ...]:
        """Per profile, each shape-tensor input's (min, opt, max) values (``get_tensor_profile_values``)."""
        ranges = []
        for index in range(self._engine.num_optimization_profiles):
            profile = {}
            for name in self.shape_inputs:
                triple = tuple(tuple(int(v) for v in r) for r in self._engine.get_tensor_profile_values(index, name))
                if len(triple) != 3:
                    raise EngineLoadError(f"engine input {name!r} sets shapes but profile {index} holds no values "
                                          "for it; rebuild the engine with trtforge (it sets them)")
                profile[name] = triple
            ranges.append(profile)
        return tuple(ranges)

    # -- devices and streams --------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        return self._device

    def _device_guard(self) -> contextlib.AbstractContextManager:
        """cudaSetDevice(our GPU) for the block, the previous device restored after."""
        return self._devices.use(self.gpu) if self.gpu is not None else contextlib.nullcontext()

    def _caller_stream(self) -> Any:
        """The calling thread's current stream on our GPU (None on an injected CPU device)."""
        return self._devices.current_stream(self.gpu) if self.gpu is not None else None

    @staticmethod
    def _handle(stream: Any) -> int:
        return int(stream.cuda_stream) if stream is not None else 0

    def _failure(self, what: str, mark: int) -> TensorRTRuntimeError:
        """TensorRT refused ``what``: its last error lines and the next step, in one message."""
        sidecar = self.sidecar.engine_path.with_suffix(".json")
        return TensorRTRuntimeError(
            f"TensorRT {what} failed for {self.sidecar.engine_path.name} on {self._device}"
            f"{'' if self.gpu is None else f' (GPU {self.gpu})'}: {tensorrt_said(mark)}. Next: trtforge doctor "
            f"{sidecar} (can this engine run here?), then trtforge check {sidecar} --route tensorrt; rebuild it "
            "for this GPU with trtforge build if doctor says so")

    # -- contexts -------------------------------------------------------------------------
    def _context(self, profile: int) -> _ContextState:
        state = self._contexts.get(profile)
        if state is not None:
            return state
        if self._runtime_config is not None:
            context = self._engine.create_execution_context(self._runtime_config)
        else:
            context = self._engine.create_execution_context()
        if context is None:
            raise Unsupported("TensorRT could not create an execution context (out of GPU memory?); "
                              "free GPU memory or load fewer engines")
        stream = self._stream if self._stream is not None or self.gpu is None else self._devices.new_stream(self.gpu)
        state = _ContextState(context, profile, stream)
        # Every context sets its profile, 0 included: TensorRT gives profile 0 only to the first context.
        mark = trt_log.mark_recent()
        if not context.set_optimization_profile_async(profile, self._handle(stream)):
            raise self._failure(f"set_optimization_profile_async({profile})", mark)
        # Outputs at the profile maximum: set the largest input shapes, read the output shapes.
        largest = max_shapes(self.profiles[profile]) if self.profiles else {
            s.name: s.shape for s in self.inputs}
        for name, shape in largest.items():
            if not context.set_input_shape(name, shape):
                raise self._failure(f"set_input_shape({name!r}, {list(shape)}) at profile {profile}'s maximum", mark)
            state.shapes[name] = tuple(shape)
        for spec in self.inputs:
            if spec.name in self.shape_inputs:  # host memory, holding the profile's largest values
                values = self._value_ranges[profile][spec.name][2]
                buffer = torch.tensor(values, dtype=torch_dtype(spec.dtype)).reshape(state.shapes.get(spec.name, (-1,)))
                context.set_tensor_address(spec.name, buffer.data_ptr())
                state.host_values[spec.name] = buffer
        for spec in self.outputs:
            shape = tuple(int(d) for d in context.get_tensor_shape(spec.name))
            if any(d < 0 for d in shape):
                raise Unsupported(
                    f"output {spec.name!r} has a data-dependent shape {list(shape)}; this route "
                    "preallocates outputs and cannot run it. Use route='onnxruntime' for this model"
                )
            buffer = torch.empty(shape, dtype=torch_dtype(spec.dtype), device=self._device)
            context.set_tensor_address(spec.name, buffer.data_ptr())
            state.buffers[spec.name] = buffer
        if self.cuda_graph and not self.native_cuda_graph:  # the runtime's own strategy replays otherwise
            state.graphs = GraphCache(self._device, stream=stream, devices=self._devices, index=self.gpu)
        self._contexts[profile] = state
        return state

    @property
    def compute_format(self) -> tuple[torch.dtype, bool]:
        """(dtype, channels_last) ``capturable_forward`` takes: the engine's input dtype, linear
        (NCHW) layout, which is TensorRT's default I/O format (our builds keep FP32 inputs)."""
        return torch_dtype(self.inputs[0].dtype), False

    # -- the call -------------------------------------------------------------------------
    def _check_values(self, profile: int, bound: list[torch.Tensor | np.ndarray]) -> None:
        """Refuse shape-tensor values outside the profile's range, before TensorRT sees them."""
        recorded = self.recorded_shape_values()
        for spec, value in zip(self.inputs, bound, strict=True):
            if spec.name in self.shape_inputs:
                low, _, high = self._value_ranges[profile][spec.name]
                check_shape_values(spec.name, value.tolist(), low, high, recorded.get(spec.name))

    def _bind(self, bound: list[torch.Tensor | np.ndarray]) -> tuple[_ContextState, dict[str, torch.Tensor]]:
        """Choose the profile, set changed shapes, values and addresses; return the context and output views.

        The caller holds the lock and the device guard.
        """
        shapes = {spec.name: tuple(t.shape) for spec, t in zip(self.inputs, bound, strict=True)}
        profile = choose_profile(self.profiles, shapes)
        self._check_values(profile, bound)
        state = self._context(profile)
        context = state.context
        for name, shape in shapes.items():
            if state.shapes.get(name) != shape:
                mark = trt_log.mark_recent()
                if not context.set_input_shape(name, shape):
                    raise self._failure(f"set_input_shape({name!r}, {list(shape)})", mark)
                state.shapes[name] = shape
        for spec, value in zip(self.inputs, bound, strict=True):
            if spec.name in self.shape_inputs:
                self._write_values(state, spec.name, value)
                continue
            address = value.data_ptr()
            if state.addresses.get(spec.name) != address:
                context.set_tensor_address(spec.name, address)
                state.addresses[spec.name] = address
        result = {}
        for spec in self.outputs:
            shape = tuple(int(d) for d in context.get_tensor_shape(spec.name))
            if math.prod(shape) > state.buffers[spec.name].numel():
                raise InternalError(f"output {spec.name!r} {list(shape)} outgrew its buffer sized for the profile's "
                                    "largest shapes and values; this is a trtforge bug, please report it")
            result[spec.name] = state.buffers[spec.name].reshape(-1)[: math.prod(shape)].view(shape)
        return state, result

    @staticmethod
    def _write_values(state: _ContextState, name: str, values: np.ndarray) -> None:
        """Copy a shape-tensor input's values into its host buffer (TensorRT reads them there when it
        infers shapes and enqueues); the address is set again after a change."""
        buffer = state.host_values[name]
        new = torch.from_numpy(values).reshape(buffer.shape)
        if not torch.equal(buffer, new):
            buffer.copy_(new)
            state.context.set_tensor_address(name, buffer.data_ptr())

    def __call__(self, *tensors: Any, **named: Any) -> dict[str, torch.Tensor]:
        self._check_open()
        bound = bind_inputs(self.inputs, self._arrange(tensors, named), self._device, self.move_inputs, self.shape_inputs)
        with self._lock, self._device_guard():
            state, result = self._bind(bound)
            self._run_ordered(state)
        return result

    def _run_ordered(self, state: _ContextState) -> None:
        """Enqueue on the context's stream, ordered after the caller's stream and before it again
        (events, as Torch-TensorRT does); a CUDA graph is captured and replayed on that stream."""
        caller, own = self._caller_stream(), state.stream
        if own is None:  # an injected CPU device: no streams
            self._execute(state.context, 0)
            return
        ordered = caller != own
        if ordered:
            own.wait_stream(caller)  # the inputs the caller queued are written first
        with self._devices.on_stream(own):
            if state.graphs is not None:
                key = (tuple(state.shapes[s.name] for s in self.inputs),
                       tuple(state.addresses.get(s.name) for s in self.inputs),
                       tuple(tuple(b.tolist()) for b in state.host_values.values()))
                state.graphs.replay(key, lambda: self._execute(state.context, self._handle(own)))
            else:
                self._execute(state.context, self._handle(own))
        if ordered:
            caller.wait_stream(own)  # what the caller queues next sees the outputs

    def capturable_forward(self, *tensors: torch.Tensor) -> dict[str, torch.Tensor]:
        """Bind ``tensors`` by pointer and enqueue the engine on the current stream; return output views.

        The tensors must already be what the engine binds (its device and input dtype, contiguous):
        nothing is copied, so the call is safe inside an outer CUDA graph capture. Shape-tensor inputs
        are host values (a list or numpy array, or left out for the recorded ones): a GPU tensor there
        would be read back, which a capture cannot hold.

        Example:
            >>> x = torch.rand(4, 3, 224, 224, device="cuda")   # float32, the engine's input
            >>> engine.capturable_forward(x)["logits"].shape
            torch.Size([4, 1000])
        """
        self._check_open()
        values = self._arrange(tensors, {})
        bound = bind_inputs(self.inputs, values, self._device, False, self.shape_inputs)
        for spec, given, used in zip(self.inputs, values, bound, strict=True):
            if used is not given and spec.name not in self.shape_inputs:  # values on the host are copied
                raise EngineInputError(
                    f"capturable_forward binds {spec.name!r} by pointer and copies nothing; pass a contiguous "
                    f"{spec.dtype} tensor on {self._device}, or call the engine itself, which copies"
                )
        with self._lock, self._device_guard():
            state, result = self._bind(bound)
            self._execute(state.context, self._handle(self._caller_stream()))
        return result

    def _execute(self, context: Any, stream: int) -> None:
        mark = trt_log.mark_recent()
        if not context.execute_async_v3(stream):
            raise self._failure("execute_async_v3", mark)

    def close(self) -> None:
        """Store the runtime cache; free contexts, graphs, output buffers and the engine (idempotent)."""
        with self._lock, self._device_guard():
            if self._engine is not None:
                self.save_runtime_cache()
            for state in self._contexts.values():
                if state.graphs is not None:
                    state.graphs.clear()
                state.buffers.clear()
            self._contexts.clear()
            self._runtime_config = self._runtime_cache = None
            self._engine = None
            self._runtime = None
            self._closed = True
