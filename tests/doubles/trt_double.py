"""A test double of TensorRT's runtime API (``FakeTrtRuntime``, ``FakeTrtEngine``, ``FakeTrtContext``).

It is NOT TensorRT. It stands in for the bindings so the real ``TensorRTEngine`` code (binding by
pointer, profile choice, output trimming, refusals, ``capturable_forward``) runs on a machine that
cannot run engines. The route is given it as ``bindings=``, which lets it run on host memory: a
"kernel" reads its inputs and writes its outputs through the raw addresses the route bound, so a
wrong or stale pointer gives wrong numbers. Like ``execute_async_v3``, a run fails (returns False)
while an I/O tensor has no address or an input no shape.

The "engine file" is JSON: ``{"model": ..., "inputs": {name: [dims]}, "profiles": [{name: [min, opt, max]}]}``,
plus ``"shape_values": [{name: [min, opt, max]}]`` (one per profile) for a model with shape-tensor inputs,
and ``"latency_ms"``: a recorded run time each ``execute_async_v3`` takes (timing tests).
Three models (see ``MODELS``):

- ``affine``: ``y = 2 * x + 1`` (same shape as ``x``) and ``total = x.sum(axis=1..)`` (shape ``[batch]``);
- ``channel_mean``: ``logits = images.mean(axis=(2, 3))`` (shape ``[batch, channels]``), a global
  average pool that an image predictor can run end to end;
- ``reshape``: ``y = x.reshape(shape)`` (ONNX Reshape: ``0`` copies a dim, ``-1`` is inferred), where
  ``shape`` is an int64 shape tensor;
- ``network``: an engine part of a partitioned module (``mirror_partitioned``): its I/O are the ones the
  description names (``"outputs"``: {name: dims}, ``-1`` for the batch), and its kernel runs the part's
  recorded network (``"record"``: the saved ``.record.pt``) with trtforge's reference evaluator, on the
  memory bound at the route's addresses. Every such run is appended to ``NETWORK_RUNS``.

Shape tensors, as TensorRT documents them: an input whose values set shapes is shape-inference I/O
(``is_shape_inference_io``), and its address (``set_tensor_address``) is HOST memory holding the
values, which the context reads when it infers output shapes (``get_tensor_shape``) and when it
enqueues. Every other I/O tensor lives in device memory. A run fails (returns False) when a shape
input's values lie outside the profile's (``get_tensor_profile_values``), or when its address points
into device memory: on a host-memory double, device memory is the bytes of the execution tensors
bound on the context (a route that bound the shape input like them would hand over such a pointer).

Flavours (``flavour(name)``, a module to pass as ``bindings=``; ``FAKE_TRT`` is TensorRT-RTX):

- ``tensorrt10``: full TensorRT without a runtime config: plain ``create_execution_context()``;
- ``tensorrt11``: full TensorRT with ``create_runtime_config`` but no CUDA-graph strategy and no
  runtime cache (what the real 11.4 and 10.16 bindings name);
- ``tensorrt_rtx``: TensorRT-RTX 1.x: a runtime config with ``cuda_graph_strategy`` and a JIT runtime cache.

Rules it enforces, as TensorRT documents them (a refused call logs an ERROR through the runtime's
logger, as TensorRT does, and returns False or None):

- the engine's first context has profile 0; every later one has none until
  ``set_optimization_profile_async`` (``set_input_shape`` and ``execute_async_v3`` fail without);
- no enqueue on the legacy default stream (handle 0) while the runtime captures CUDA graphs
  (TensorRT-RTX's WHOLE_GRAPH_CAPTURE); no stream of another device;
- shape tensors in host memory (below); the device current at deserialize (below);
- an engine file with ``"enqueue_error": message`` fails every enqueue with that message logged (a
  failure only the GPU finds, e.g. a kernel's illegal address).

Devices (``FAKE_CUDA``, from tests/doubles/cuda_double.py): ``FAKE_CUDA`` (a ``trtforge.runtime.placement.DeviceRuntime``, given to the route as
``devices=``) keeps the CUDA runtime's current device per thread, as cudaSetDevice does, for a
machine with two GPUs whose tensors live in host memory. TensorRT binds an engine to the device
current when it is deserialized (its contexts and runs must use that device): the double records
the current device at ``deserialize_cuda_engine``, ``create_execution_context`` and every
``execute_async_v3``, and a context created or run on another device fails, as TensorRT would.
Its streams (``new_stream``, ``current_stream``: the legacy default stream, handle 0, until a thread
picks another with ``on_stream``) record every event ordering in ``waits``. ``capture`` records a CUDA
graph as CUDA does: the warm-up calls run, then an enqueue on the capturing stream is recorded with
the bindings it had (not run; another stream, or the legacy default stream, fails), and ``replay``
runs the recorded work again on whatever those addresses hold then.
"""

from __future__ import annotations

import ctypes
import dataclasses
import enum
import functools
import json
import math
import time
import types
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from cuda_double import FAKE_CUDA, FakeCudaDevices, FakeGraph, FakeStream  # noqa: F401 - re-exported

from trtforge.core.hashing import sha256_file
from trtforge.core.sidecar import Sidecar, write_sidecar
from trtforge.core.specs import TensorSpec


@dataclass(frozen=True)
class FakeModel:
    """A double's model: its I/O names, in engine order, and the inputs read as shape tensors."""

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    shape_inputs: tuple[str, ...] = ()

    @property
    def tensor_input(self) -> str:
        """The (one) execution input, the tensor the kernel computes on."""
        return next(n for n in self.inputs if n not in self.shape_inputs)


MODELS: dict[str, FakeModel] = {
    "affine": FakeModel(("x",), ("y", "total")),
    "channel_mean": FakeModel(("images",), ("logits",)),
    "reshape": FakeModel(("x", "shape"), ("y",), shape_inputs=("shape",)),
}


#: The record files of the ``network`` engines run so far, one entry per run (tests clear it).
NETWORK_RUNS: list[str] = []


def _spec(description: dict) -> FakeModel:
    """The I/O of the engine ``description`` holds: its model's, or a ``network`` engine's own names."""
    if description.get("model") == "network":
        return FakeModel(tuple(description["inputs"]), tuple(description["outputs"]))
    return MODELS[description.get("model", "affine")]


def _run_network(description: dict, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A ``network`` engine's kernel: the recorded network through the reference evaluator."""
    import torch

    from trtforge.convert.evaluator import evaluate
    from trtforge.convert.saved import read_record

    record = read_record(Path(description["record"]))
    outputs = evaluate(record, {name: torch.from_numpy(value.copy()) for name, value in feeds.items()})
    NETWORK_RUNS.append(description["record"])
    return {name: out.numpy() for name, out in zip(record.outputs, outputs, strict=True)}


def _reshaped(x: tuple[int, ...], shape: list[int]) -> tuple[int, ...]:
    """ONNX Reshape's output shape: 0 copies the input dim, -1 takes what is left; all -1 when the
    values do not fit ``x`` (TensorRT's shape inference fails then)."""
    dims = [x[i] if d == 0 and i < len(x) else d for i, d in enumerate(shape)]
    try:
        return tuple(np.empty(x, np.bool_).reshape(dims).shape)
    except ValueError:
        return (-1,) * len(shape)


def _output_shapes(model: str, x: tuple[int, ...], values: dict[str, list[int]] | None = None,
                   rank: int = 0) -> dict[str, tuple[int, ...]]:
    """Output shapes for input shape ``x`` (``-1`` dims stay ``-1``, as TensorRT reports them); for
    ``reshape``, from the shape input's ``values`` (-1 dims of ``rank`` without them)."""
    if model == "affine":
        return {"y": x, "total": (x[0],)}
    if model == "reshape":
        if values is None or -1 in x:
            return {"y": (-1,) * rank}
        return {"y": _reshaped(x, values["shape"])}
    return {"logits": x[:2]}


def _run(model: str, x: np.ndarray, values: dict[str, list[int]]) -> dict[str, np.ndarray]:
    if model == "affine":
        return {"y": 2 * x + 1, "total": x.reshape(x.shape[0], -1).sum(axis=1)}
    if model == "reshape":
        return {"y": x.reshape(_reshaped(x.shape, values["shape"]))}
    return {"logits": x.mean(axis=(2, 3))}


class ILogger:
    """TensorRT's logger interface: TensorRT calls ``log(severity, msg)`` for what it reports."""

    class Severity(enum.Enum):
        INTERNAL_ERROR = 0
        ERROR = 1
        WARNING = 2
        INFO = 3
        VERBOSE = 4

    def __init__(self) -> None:
        pass

    def log(self, severity: ILogger.Severity, msg: str) -> None:
        pass


class Logger(ILogger):
    WARNING = ILogger.Severity.WARNING

    def __init__(self, severity: ILogger.Severity = ILogger.Severity.WARNING) -> None:
        super().__init__()
        self.severity = severity


class TensorIOMode(enum.Enum):
    NONE = 0
    INPUT = 1
    OUTPUT = 2


class DataType(enum.Enum):
    FLOAT = 0
    HALF = 1
    INT32 = 3
    INT64 = 10


#: How the double reads each type from raw memory.
_CTYPES = {DataType.FLOAT: ctypes.c_float, DataType.INT32: ctypes.c_int32, DataType.INT64: ctypes.c_int64}


class CudaGraphStrategy(enum.Enum):
    DISABLED = 0
    WHOLE_GRAPH_CAPTURE = 1


class FakeRuntimeCache:
    """``IRuntimeCache``: the kernels a JIT compiled, by (model, input shape). ``deserialize`` checks the
    blob and returns False (leaving the cache as it was) for a corrupt one or another engine's."""

    FORMAT = "trt-double-runtime-cache-1"

    def __init__(self, engine: FakeTrtEngine) -> None:
        self.engine = engine
        self.kernels: set[str] = set()

    def serialize(self) -> bytes:
        return json.dumps({"format": self.FORMAT, "engine": self.engine.model,
                           "kernels": sorted(self.kernels)}).encode()

    def deserialize(self, blob) -> bool:
        try:
            data = json.loads(bytes(memoryview(blob)))
        except ValueError:
            return False
        if not isinstance(data, dict) or data.get("format") != self.FORMAT or data.get("engine") != self.engine.model:
            return False
        self.kernels = set(data["kernels"])
        return True

    def reset(self) -> None:
        self.kernels.clear()


class FakeRuntimeConfig:
    """``IRuntimeConfig`` of full TensorRT (11.4; 10.16 has one too): execution-context settings, no
    CUDA-graph strategy and no runtime cache (the real 10.16 and 11.4 bindings name neither)."""

    def __init__(self, engine: FakeTrtEngine) -> None:
        self.engine = engine
        self.device = FAKE_CUDA.current()  # the current device when the route created it

    @property
    def captures(self) -> bool:
        """Whether the runtime captures CUDA graphs itself (TensorRT-RTX's WHOLE_GRAPH_CAPTURE)."""
        return False


class FakeRtxRuntimeConfig(FakeRuntimeConfig):
    """TensorRT-RTX's ``IRuntimeConfig``: the CUDA-graph strategy and the runtime cache its contexts share."""

    def __init__(self, engine: FakeTrtEngine) -> None:
        super().__init__(engine)
        self.cuda_graph_strategy = CudaGraphStrategy.DISABLED
        self.cache: FakeRuntimeCache | None = None

    @property
    def captures(self) -> bool:
        return self.cuda_graph_strategy == CudaGraphStrategy.WHOLE_GRAPH_CAPTURE

    def create_runtime_cache(self) -> FakeRuntimeCache:
        return FakeRuntimeCache(self.engine)

    def set_runtime_cache(self, cache: FakeRuntimeCache) -> bool:
        self.cache = cache
        return True

    def get_runtime_cache(self) -> FakeRuntimeCache | None:
        return self.cache




class FakeTrtContext:
    """Records what the route asked for, and runs the double's kernel through raw addresses.

    A first run per input shape "JIT-compiles" its kernel (``engine.compilations`` counts them)
    unless the runtime config's cache already holds it; compiled kernels go into that cache.
    """

    def __init__(self, engine: FakeTrtEngine, runtime_config: FakeRuntimeConfig | None = None) -> None:
        self.engine = engine
        self.runtime_config = runtime_config
        self.compiled: set[str] = set()
        # TensorRT selects profile 0 implicitly for the engine's FIRST context only; a later one has
        # none until set_optimization_profile_async.
        self.profile: int | None = 0 if not engine.contexts else None
        self.input_shapes: dict[str, tuple[int, ...]] = {}
        self.addresses: dict[str, int] = {}
        self.calls: list[tuple] = []
        self.run_devices: list[int] = []  # the current device at each execute_async_v3

    def _error(self, message: str) -> bool:
        """Log ``message`` as TensorRT does (an ERROR through the runtime's logger); False."""
        self.engine.runtime.logger.log(ILogger.Severity.ERROR, message)
        return False

    def _stream_error(self, call: str, stream: int) -> str | None:
        """Why ``stream`` cannot take this context's work, or None."""
        if not isinstance(stream, int):
            return f"{call}: Error Code 3: API Usage Error (stream_handle must be an int, got {type(stream).__name__})"
        known = FAKE_CUDA.streams.get(stream)
        if known is not None and known.device != self.engine.device:
            return f"{call}: Error Code 1: Cuda Runtime (invalid resource handle: stream of device {known.device})"
        return None

    def set_optimization_profile_async(self, index: int, stream: int) -> bool:
        self.calls.append(("set_optimization_profile_async", index, stream))
        if (why := self._stream_error("IExecutionContext::setOptimizationProfileAsync", stream)) is not None:
            return self._error(why)
        if not 0 <= index < self.engine.num_optimization_profiles:
            return self._error(f"IExecutionContext::setOptimizationProfileAsync: Error Code 3: API Usage Error "
                               f"(profileIndex {index} out of range)")
        self.profile = index
        return True

    def set_input_shape(self, name: str, shape) -> bool:
        shape = tuple(int(d) for d in shape)
        self.calls.append(("set_input_shape", name, shape))
        if self.profile is None:
            return self._error("IExecutionContext::setInputShape: Error Code 3: API Usage Error (Parameter check "
                               "failed, condition: mOptimizationProfile >= 0. No optimization profile is set on this "
                               "context: set one with setOptimizationProfileAsync)")
        lo, _, hi = self.engine.get_tensor_profile_shape(name, self.profile)
        if any(not (a <= d <= b) for d, a, b in zip(shape, lo, hi, strict=False)):
            return self._error(f"IExecutionContext::setInputShape: Error Code 3: API Usage Error (Parameter check "
                               f"failed, condition: {name} dimensions {list(shape)} within profile {self.profile})")
        self.input_shapes[name] = shape
        return True

    def set_tensor_address(self, name: str, address: int) -> bool:
        self.calls.append(("set_tensor_address", name, address))
        self.addresses[name] = int(address)
        return True

    def get_tensor_shape(self, name: str) -> tuple[int, ...]:
        engine = self.engine
        if name in engine.spec.inputs:
            return self.input_shapes.get(name, engine.get_tensor_shape(name))
        x = self.get_tensor_shape(engine.spec.tensor_input)
        if engine.model == "network":  # the description's dims, the batch (-1) taken from the input
            return tuple(x[0] if d == -1 else d for d in engine.description["outputs"][name])
        values = self._shape_values()
        return _output_shapes(engine.model, x, values, len(engine.get_tensor_shape(name)))[name]

    def _shape_values(self) -> dict[str, list[int]] | None:
        """The shape inputs' values, read from the host memory at their addresses (None while one has none)."""
        values = {}
        for name in self.engine.spec.shape_inputs:
            if name not in self.addresses:
                return None
            shape = self.input_shapes.get(name, self.engine.get_tensor_shape(name))
            values[name] = self._view(self.addresses[name], shape, self.engine.get_tensor_dtype(name)).tolist()
        return values

    @staticmethod
    def _view(address: int, shape: tuple[int, ...], dtype: DataType = DataType.FLOAT) -> np.ndarray:
        pointer = ctypes.cast(address, ctypes.POINTER(_CTYPES[dtype]))
        return np.ctypeslib.as_array(pointer, shape=shape)

    def _device_ranges(self) -> list[tuple[int, int]]:
        """[start, end) byte ranges of the execution tensors bound here: device memory."""
        names = [n for n in (*self.engine.spec.inputs, *self.engine.spec.outputs)
                 if n not in self.engine.spec.shape_inputs]
        shapes = {n: self.get_tensor_shape(n) for n in names}
        return [(self.addresses[n], self.addresses[n] + 4 * math.prod(shapes[n])) for n in names if -1 not in shapes[n]]

    def _values_fit(self, values: dict[str, list[int]]) -> bool:
        """Shape inputs' values on the host, inside the profile's range."""
        device = self._device_ranges()
        for name, got in values.items():
            if any(start <= self.addresses[name] < end for start, end in device):
                return False  # a device pointer: TensorRT reads shape tensors on the host
            low, _, high = self.engine.get_tensor_profile_values(self.profile, name)
            if len(got) != len(low) or any(not a <= v <= b for v, a, b in zip(got, low, high, strict=True)):
                return False
        return True

    def _jit(self, kernel: str) -> None:
        cache = getattr(self.runtime_config, "cache", None)
        known = cache.kernels if cache is not None else self.compiled
        if kernel not in known:
            self.engine.compilations += 1
            known.add(kernel)

    def _refusal(self, stream: int) -> str | None:
        """Why TensorRT would refuse to enqueue on ``stream`` now, or None."""
        if FAKE_CUDA.current() != self.engine.device:  # the engine's memory and kernels are on its own device
            return "IExecutionContext::enqueueV3: Error Code 1: Cuda Runtime (invalid device context)"
        if (why := self._stream_error("IExecutionContext::enqueueV3", stream)) is not None:
            return why
        if self.profile is None:
            return ("IExecutionContext::enqueueV3: Error Code 3: API Usage Error (no optimization profile is set on "
                    "this context)")
        if stream == 0 and self.runtime_config is not None and self.runtime_config.captures:
            return ("IExecutionContext::enqueueV3: Error Code 1: Cuda Runtime (operation not permitted when stream is "
                    "capturing: CUDA graph capture on the legacy default stream)")
        spec = self.engine.spec
        if any(n not in self.input_shapes for n in spec.inputs if n not in spec.shape_inputs) or any(
                n not in self.addresses for n in (*spec.inputs, *spec.outputs)):
            return "IExecutionContext::enqueueV3: Error Code 3: API Usage Error (an I/O tensor has no address)"
        return self.engine.description.get("enqueue_error")

    def execute_async_v3(self, stream: int) -> bool:
        self.calls.append(("execute_async_v3", stream))
        self.run_devices.append(FAKE_CUDA.current())
        if (why := self._refusal(stream)) is not None:
            return self._error(why)
        graph = FAKE_CUDA.capturing()
        if graph is not None:  # recorded into the graph, run by its replays (with the memory's values then)
            if stream != graph.stream.cuda_stream:
                return self._error("IExecutionContext::enqueueV3: Error Code 1: Cuda Runtime (operation not "
                                   "permitted when stream is capturing: enqueued on another stream than the capture's)")
            frozen = (dict(self.input_shapes), dict(self.addresses))  # a graph keeps the bindings it captured
            graph.work.append(lambda: self._replay(*frozen))
            return True
        return self._kernel()

    def _replay(self, shapes: dict, addresses: dict) -> bool:
        now = self.input_shapes, self.addresses
        self.input_shapes, self.addresses = shapes, addresses
        try:
            return self._kernel()
        finally:
            self.input_shapes, self.addresses = now

    def _kernel(self) -> bool:
        """Run the model on the memory bound now (an enqueue, or a graph's replay of one)."""
        spec = self.engine.spec
        values = self._shape_values() or {}
        if not self._values_fit(values) or any(-1 in self.get_tensor_shape(n) for n in spec.outputs):
            return self._error("IExecutionContext::enqueueV3: Error Code 7: Internal Error (shape tensor values)")
        shape = self.input_shapes[spec.tensor_input]
        self._jit(f"{self.engine.model}:{'x'.join(map(str, shape))}")
        x = self._view(self.addresses[spec.tensor_input], shape)
        time.sleep(self.engine.description.get("latency_ms", 0) / 1000.0)  # the engine's recorded run time
        if self.engine.model == "network":
            feeds = {n: self._view(self.addresses[n], self.input_shapes[n]) for n in spec.inputs}
            results = _run_network(self.engine.description, feeds)
        else:
            results = _run(self.engine.model, x, values)
        for name, value in results.items():
            self._view(self.addresses[name], self.get_tensor_shape(name))[...] = value
        return True


class FakeTrtEngine:
    """``ICudaEngine`` of a full TensorRT without a runtime config: plain ``create_execution_context``."""

    def __init__(self, description: dict, runtime: FakeTrtRuntime) -> None:
        self.description = description
        self.runtime = runtime
        self.model = description.get("model", "affine")
        self.spec = _spec(description)
        self.contexts: list[FakeTrtContext] = []
        self.num_optimization_profiles = len(description["profiles"])
        self.num_io_tensors = len(self.spec.inputs) + len(self.spec.outputs)
        self.compilations = 0
        self.runtime_configs: list[FakeRuntimeConfig] = []
        self.device = FAKE_CUDA.current()  # bound to the device current at deserialization

    def get_tensor_name(self, index: int) -> str:
        return (*self.spec.inputs, *self.spec.outputs)[index]

    def get_tensor_mode(self, name: str) -> TensorIOMode:
        return TensorIOMode.INPUT if name in self.spec.inputs else TensorIOMode.OUTPUT

    def get_tensor_dtype(self, name: str) -> DataType:
        return DataType.INT64 if name in self.spec.shape_inputs else DataType.FLOAT

    def is_shape_inference_io(self, name: str) -> bool:
        return name in self.spec.shape_inputs

    def get_tensor_shape(self, name: str) -> tuple[int, ...]:
        if name in self.spec.inputs:
            return tuple(self.description["inputs"][name])
        x = tuple(self.description["inputs"][self.spec.tensor_input])
        if self.model == "network":
            return tuple(self.description["outputs"][name])
        rank = self.description["inputs"][self.spec.shape_inputs[0]][0] if self.spec.shape_inputs else 0
        return _output_shapes(self.model, x, None, rank)[name]

    def get_tensor_profile_shape(self, name: str, profile: int):
        return tuple(tuple(d) for d in self.description["profiles"][profile][name])

    def get_tensor_profile_values(self, profile: int, name: str) -> list[list[int]]:
        """(min, opt, max) values of a shape input; TensorRT raises for any other tensor."""
        if name not in self.spec.shape_inputs:
            raise RuntimeError(f"{name} is not an input shape binding")
        return [list(v) for v in self.description["shape_values"][profile][name]]

    def create_execution_context(self, runtime_config: FakeRuntimeConfig | None = None) -> FakeTrtContext | None:
        if FAKE_CUDA.current() != self.device:  # a context's memory is allocated on the current device
            self.runtime.logger.log(ILogger.Severity.ERROR, "ICudaEngine::createExecutionContext: Error Code 1: "
                                    "Cuda Runtime (the current device is not the engine's)")
            return None
        context = FakeTrtContext(self, runtime_config)
        self.contexts.append(context)
        return context


class FakeConfigEngine(FakeTrtEngine):
    """``ICudaEngine`` of full TensorRT 11 (and late 10): contexts may come from a runtime config."""

    CONFIG: type[FakeRuntimeConfig] = FakeRuntimeConfig

    def create_runtime_config(self) -> FakeRuntimeConfig:
        config = self.CONFIG(self)
        self.runtime_configs.append(config)
        return config


class FakeRtxEngine(FakeConfigEngine):
    """TensorRT-RTX's ``ICudaEngine``: its runtime config carries the CUDA-graph strategy and the runtime cache."""

    CONFIG = FakeRtxRuntimeConfig


class FakeTrtRuntime:
    last: FakeTrtRuntime | None = None
    #: The engine class this flavour deserializes (``flavour`` makes one runtime class per flavour).
    ENGINE: type[FakeTrtEngine] = FakeRtxEngine

    def __init__(self, logger: ILogger) -> None:
        self.logger = logger
        self.engine_host_code_allowed = True
        self.engines: list[FakeTrtEngine] = []
        FakeTrtRuntime.last = self

    def deserialize_cuda_engine(self, data: bytes) -> FakeTrtEngine | None:
        try:
            description = json.loads(data)
        except ValueError:
            self.logger.log(ILogger.Severity.ERROR, "IRuntime::deserializeCudaEngine: Error Code 1: Serialization "
                            "(Serialization assertion magicTagRead == kMAGIC_TAG failed.Magic tag does not match)")
            return None
        engine = self.ENGINE(description, self)
        self.engines.append(engine)
        return engine


@dataclass(frozen=True)
class Flavour:
    """One TensorRT flavour the double imitates: the bindings' module name and version, and its engine."""

    module: str
    version: str
    engine: type[FakeTrtEngine]

    @property
    def rtx(self) -> bool:
        return self.module == "tensorrt_rtx"


#: The flavours (``flavour(name)``): full TensorRT 10 without a runtime config (plain
#: ``create_execution_context``), full TensorRT 11 (a runtime config, no CUDA-graph strategy and no
#: runtime cache), and TensorRT-RTX 1.x (both).
FLAVOURS: dict[str, Flavour] = {
    "tensorrt10": Flavour("tensorrt", "10.10.0.31", FakeTrtEngine),
    "tensorrt11": Flavour("tensorrt", "11.4.0.106", FakeConfigEngine),
    "tensorrt_rtx": Flavour("tensorrt_rtx", "1.7.1.116", FakeRtxEngine),
}


@functools.cache
def flavour(name: str) -> types.ModuleType:
    """The double as a bindings module of flavour ``name`` (a key of ``FLAVOURS``), to pass as ``bindings=``.

    Example:
        >>> TensorRTEngine(path, device="cuda:0", bindings=flavour("tensorrt11"), devices=FAKE_CUDA)
    """
    spec = FLAVOURS[name]
    module = types.ModuleType(spec.module, f"the TensorRT double as {name}")
    module.__version__ = spec.version
    runtime = type("FakeTrtRuntime", (FakeTrtRuntime,), {"ENGINE": spec.engine, "__module__": __name__})
    members = {"ILogger": ILogger, "Logger": Logger, "TensorIOMode": TensorIOMode, "DataType": DataType,
               "Runtime": runtime, "ICudaEngine": spec.engine, "IExecutionContext": FakeTrtContext}
    if spec.engine is not FakeTrtEngine:
        members["IRuntimeConfig"] = spec.engine.CONFIG
    if spec.rtx:
        members.update(CudaGraphStrategy=CudaGraphStrategy, IRuntimeCache=FakeRuntimeCache)
    for key, value in members.items():
        setattr(module, key, value)
    return module


Runtime = FakeTrtRuntime


@dataclass(frozen=True)
class FakeTensorRT:
    """One flavour of the double, as a test fixture hands it (``tests/conftest.py``: ``fake_trt``)."""

    name: str

    @property
    def bindings(self) -> types.ModuleType:
        return flavour(self.name)

    @property
    def rtx(self) -> bool:
        return FLAVOURS[self.name].rtx

    @property
    def runtime_config(self) -> bool:
        """Whether this flavour's engines offer ``create_runtime_config``."""
        return FLAVOURS[self.name].engine is not FakeTrtEngine

    def load(self, path: Path, device: str | int = "cuda:0", **kwargs):
        """``TensorRTEngine`` over this flavour, on a GPU of ``FAKE_CUDA`` (host memory, fake streams)."""
        from trtforge.runtime.tensorrt_route import TensorRTEngine

        return TensorRTEngine(path, device=device, bindings=self.bindings, devices=FAKE_CUDA, **kwargs)

#: The TensorRT-RTX flavour, the bindings this machine has.
FAKE_TRT = flavour("tensorrt_rtx")


def write_fake_engine(
    folder: Path, profiles: list[dict], feature_dims: tuple[int, ...] = (3,), host_code: bool = False,
    name: str = "fake", model: str = "affine", preprocessing: dict | None = None, enqueue_error: str | None = None,
) -> Path:
    """Write a double's engine file and a real trtforge sidecar beside it; return the engine path.

    ``profiles`` are ``[{input name: [min, opt, max]}]``; the input is ``[-1, *feature_dims]``.
    ``enqueue_error``: every enqueue fails with this message logged (see the module docstring).
    """
    folder.mkdir(parents=True, exist_ok=True)
    engine = folder / f"{name}.engine"
    input_name, output_names = MODELS[model].tensor_input, MODELS[model].outputs
    dims = (-1, *feature_dims)
    description = {"model": model, "inputs": {input_name: list(dims)}, "profiles": profiles}
    if enqueue_error is not None:
        description["enqueue_error"] = enqueue_error
    engine.write_text(json.dumps(description))
    outputs = _output_shapes(model, dims)
    sidecar = Sidecar(
        name=name, engine_file=engine.name, engine_size=engine.stat().st_size,
        engine_sha256=sha256_file(engine),
        inputs=(TensorSpec(input_name, "float32", dims),),
        outputs=tuple(TensorSpec(n, "float32", outputs[n]) for n in output_names),
        profiles=tuple({input_name: {"min": p[input_name][0], "opt": p[input_name][1], "max": p[input_name][2]}}
                       for p in profiles),
        precision={"requested": "fp32", "built": "fp32"}, builder={"flavour": "double", "host_code": host_code}, source={"kind": "onnx"},
        preprocessing=preprocessing,
    )
    write_sidecar(engine.with_suffix(".json"), sidecar)
    return engine


def mirror_engine(folder: Path, sidecar: Sidecar, model: str) -> Path:
    """A double's engine standing in for a real TensorRT-RTX build: its I/O, profiles and shape-input
    values are the ones the build's ``sidecar`` records (profile values min = opt = max, as the builder
    sets them), written with a copy of that sidecar naming the double's engine file; returns its path.

    Example:
        >>> mirror_engine(tmp_path, read_sidecar(art.sidecar_path), "reshape")
        PosixPath('.../reshape.engine')
    """
    folder.mkdir(parents=True, exist_ok=True)
    engine = folder / f"{model}.engine"
    values = {r.name: [list(r.values)] * 3 for r in sidecar.shape_inputs}
    engine.write_text(json.dumps({
        "model": model, "inputs": {s.name: list(s.shape) for s in sidecar.inputs},
        "profiles": [{k: [r["min"], r["opt"], r["max"]] for k, r in p.items()} for p in sidecar.profiles],
        "shape_values": [values] * len(sidecar.profiles)}))
    copy = dataclasses.replace(sidecar, engine_file=engine.name, engine_size=engine.stat().st_size,
                               engine_sha256=sha256_file(engine))
    write_sidecar(engine.with_suffix(".json"), copy)
    return engine


def mirror_partitioned(folder: Path) -> list[Path]:
    """Replace each engine part of the partitioned-module folder ``folder`` (``trtforge.convert.saved``) by a
    double's ``network`` engine that runs the part's recorded network, with its sidecar rewritten to name
    the new bytes (I/O and profiles as the build's sidecar records them); returns the engine paths.

    Example:
        >>> mirror_partitioned(art.folder)
        [PosixPath('.../fused_0.engine'), PosixPath('.../fused_2.engine')]
    """
    from trtforge.core.sidecar import read_sidecar

    manifest = json.loads((folder / "manifest.json").read_text())
    engines = []
    for entry in manifest["engines"].values():
        sidecar = read_sidecar(folder / entry["sidecar"])
        engine = sidecar.engine_path
        engine.write_text(json.dumps({
            "model": "network", "record": str(folder / entry["record"]),
            "inputs": {s.name: list(s.shape) for s in sidecar.inputs},
            "outputs": {s.name: list(s.shape) for s in sidecar.outputs},
            "profiles": [{k: [r["min"], r["opt"], r["max"]] for k, r in p.items()} for p in sidecar.profiles]}))
        copy = dataclasses.replace(sidecar, engine_size=engine.stat().st_size, engine_sha256=sha256_file(engine))
        write_sidecar(folder / entry["sidecar"], copy)
        engines.append(engine)
    return engines
