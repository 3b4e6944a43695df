"""A test double of TensorRT's runtime API (``FakeTrtRuntime``, ``FakeTrtEngine``, ``FakeTrtContext``).

It is NOT TensorRT. It stands in for the bindings so the real ``TensorRTEngine`` code (binding by
pointer, profile choice, output trimming, refusals, ``capturable_forward``) runs on a machine that
cannot run engines. The route is given it as ``bindings=``, which lets it run on host memory: a
"kernel" reads its inputs and writes its outputs through the raw addresses the route bound, so a
wrong or stale pointer gives wrong numbers. Like ``execute_async_v3``, a run fails (returns False)
while an I/O tensor has no address or an input no shape.

The "engine file" is JSON: ``{"model": ..., "inputs": {name: [dims]}, "profiles": [{name: [min, opt, max]}]}``.
Two models, one float32 input each (see ``MODELS``):

- ``affine``: ``y = 2 * x + 1`` (same shape as ``x``) and ``total = x.sum(axis=1..)`` (shape ``[batch]``);
- ``channel_mean``: ``logits = images.mean(axis=(2, 3))`` (shape ``[batch, channels]``), a global
  average pool that an image predictor can run end to end.

Devices: ``FAKE_CUDA`` (a ``trtforge.runtime.placement.DeviceRuntime``, given to the route as
``devices=``) keeps the CUDA runtime's current device per thread, as cudaSetDevice does, for a
machine with two GPUs whose tensors live in host memory. TensorRT binds an engine to the device
current when it is deserialized (its contexts and runs must use that device): the double records
the current device at ``deserialize_cuda_engine``, ``create_execution_context`` and every
``execute_async_v3``, and a context created or run on another device fails, as TensorRT would.
"""

from __future__ import annotations

import contextlib
import ctypes
import enum
import json
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from trtforge.core.hashing import sha256_file
from trtforge.core.sidecar import Sidecar, write_sidecar
from trtforge.core.specs import TensorSpec

#: model → (input name, output names).
MODELS: dict[str, tuple[str, tuple[str, ...]]] = {
    "affine": ("x", ("y", "total")),
    "channel_mean": ("images", ("logits",)),
}


def _output_shapes(model: str, x: tuple[int, ...]) -> dict[str, tuple[int, ...]]:
    """Output shapes for input shape ``x`` (``-1`` dims stay ``-1``, as TensorRT reports them)."""
    if model == "affine":
        return {"y": x, "total": (x[0],)}
    return {"logits": x[:2]}


def _run(model: str, x: np.ndarray) -> dict[str, np.ndarray]:
    if model == "affine":
        return {"y": 2 * x + 1, "total": x.reshape(x.shape[0], -1).sum(axis=1)}
    return {"logits": x.mean(axis=(2, 3))}


class Logger:
    WARNING = 2

    def __init__(self, severity: int = 2) -> None:
        self.severity = severity


class TensorIOMode(enum.Enum):
    NONE = 0
    INPUT = 1
    OUTPUT = 2


class DataType(enum.Enum):
    FLOAT = 0
    HALF = 1


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
    """``IRuntimeConfig``: the CUDA-graph strategy and the runtime cache its contexts share."""

    def __init__(self, engine: FakeTrtEngine) -> None:
        self.engine = engine
        self.device = FAKE_CUDA.current()  # the current device when the route created it
        self.cuda_graph_strategy = CudaGraphStrategy.DISABLED
        self.cache: FakeRuntimeCache | None = None

    def create_runtime_cache(self) -> FakeRuntimeCache:
        return FakeRuntimeCache(self.engine)

    def set_runtime_cache(self, cache: FakeRuntimeCache) -> bool:
        self.cache = cache
        return True

    def get_runtime_cache(self) -> FakeRuntimeCache | None:
        return self.cache


class FakeCudaDevices:
    """The CUDA runtime's device state for ``count`` GPUs: the current device per thread (0 until a
    thread sets another), and every switch made (``switches``). Tensors live in host memory."""

    def __init__(self, count: int = 2) -> None:
        self._count = count
        self._local = threading.local()
        self.switches: list[int] = []

    def count(self) -> int:
        return self._count

    def current(self) -> int:
        return getattr(self._local, "index", 0)

    @contextlib.contextmanager
    def use(self, index: int) -> Iterator[None]:
        """cudaSetDevice(index) for the block, then the previous device again."""
        if not 0 <= index < self._count:
            raise RuntimeError(f"cudaErrorInvalidDevice: device {index} of {self._count}")
        previous = self.current()
        self._local.index = index
        self.switches.append(index)
        try:
            yield
        finally:
            self._local.index = previous

    def memory(self, index: int) -> torch.device:
        return torch.device("cpu")


#: The process's CUDA runtime as the double sees it (two GPUs).
FAKE_CUDA = FakeCudaDevices(2)


class FakeTrtContext:
    """Records what the route asked for, and runs the double's kernel through raw addresses.

    A first run per input shape "JIT-compiles" its kernel (``engine.compilations`` counts them)
    unless the runtime config's cache already holds it; compiled kernels go into that cache.
    """

    def __init__(self, engine: FakeTrtEngine, runtime_config: FakeRuntimeConfig | None = None) -> None:
        self.engine = engine
        self.runtime_config = runtime_config
        self.compiled: set[str] = set()
        self.profile = 0
        self.input_shapes: dict[str, tuple[int, ...]] = {}
        self.addresses: dict[str, int] = {}
        self.calls: list[tuple] = []
        self.run_devices: list[int] = []  # the current device at each execute_async_v3

    def set_optimization_profile_async(self, index: int, stream: int) -> bool:
        self.calls.append(("set_optimization_profile_async", index))
        self.profile = index
        return True

    def set_input_shape(self, name: str, shape) -> bool:
        shape = tuple(int(d) for d in shape)
        self.calls.append(("set_input_shape", name, shape))
        lo, _, hi = self.engine.get_tensor_profile_shape(name, self.profile)
        if any(not (a <= d <= b) for d, a, b in zip(shape, lo, hi, strict=False)):
            return False
        self.input_shapes[name] = shape
        return True

    def set_tensor_address(self, name: str, address: int) -> bool:
        self.calls.append(("set_tensor_address", name, address))
        self.addresses[name] = int(address)
        return True

    def get_tensor_shape(self, name: str) -> tuple[int, ...]:
        if name == self.engine.input_name:
            return self.input_shapes.get(name, self.engine.get_tensor_shape(name))
        return _output_shapes(self.engine.model, self.get_tensor_shape(self.engine.input_name))[name]

    @staticmethod
    def _view(address: int, shape: tuple[int, ...]) -> np.ndarray:
        pointer = ctypes.cast(address, ctypes.POINTER(ctypes.c_float))
        return np.ctypeslib.as_array(pointer, shape=shape)

    def _jit(self, kernel: str) -> None:
        cache = self.runtime_config.cache if self.runtime_config is not None else None
        known = cache.kernels if cache is not None else self.compiled
        if kernel not in known:
            self.engine.compilations += 1
            known.add(kernel)

    def execute_async_v3(self, stream: int) -> bool:
        current = FAKE_CUDA.current()
        self.calls.append(("execute_async_v3", stream))
        self.run_devices.append(current)
        if current != self.engine.device:  # the engine's memory and kernels are on its own device
            return False
        names = (self.engine.input_name, *self.engine.output_names)
        if self.engine.input_name not in self.input_shapes or any(n not in self.addresses for n in names):
            return False
        shape = self.input_shapes[self.engine.input_name]
        self._jit(f"{self.engine.model}:{'x'.join(map(str, shape))}")
        x = self._view(self.addresses[self.engine.input_name], shape)
        for name, value in _run(self.engine.model, x).items():
            self._view(self.addresses[name], self.get_tensor_shape(name))[...] = value
        return True


class FakeTrtEngine:
    def __init__(self, description: dict) -> None:
        self.description = description
        self.model = description.get("model", "affine")
        self.input_name, self.output_names = MODELS[self.model]
        self.contexts: list[FakeTrtContext] = []
        self.num_optimization_profiles = len(description["profiles"])
        self.num_io_tensors = 1 + len(self.output_names)
        self.compilations = 0
        self.runtime_configs: list[FakeRuntimeConfig] = []
        self.device = FAKE_CUDA.current()  # bound to the device current at deserialization

    def get_tensor_name(self, index: int) -> str:
        return (self.input_name, *self.output_names)[index]

    def get_tensor_mode(self, name: str) -> TensorIOMode:
        return TensorIOMode.INPUT if name == self.input_name else TensorIOMode.OUTPUT

    def get_tensor_dtype(self, name: str) -> DataType:
        return DataType.FLOAT

    def get_tensor_shape(self, name: str) -> tuple[int, ...]:
        x = tuple(self.description["inputs"][self.input_name])
        return x if name == self.input_name else _output_shapes(self.model, x)[name]

    def get_tensor_profile_shape(self, name: str, profile: int):
        return tuple(tuple(d) for d in self.description["profiles"][profile][name])

    def create_runtime_config(self) -> FakeRuntimeConfig:
        config = FakeRuntimeConfig(self)
        self.runtime_configs.append(config)
        return config

    def create_execution_context(self, runtime_config: FakeRuntimeConfig | None = None) -> FakeTrtContext | None:
        if FAKE_CUDA.current() != self.device:  # a context's memory is allocated on the current device
            return None
        context = FakeTrtContext(self, runtime_config)
        self.contexts.append(context)
        return context


class FakeTrtRuntime:
    last: FakeTrtRuntime | None = None

    def __init__(self, logger: Logger) -> None:
        self.logger = logger
        self.engine_host_code_allowed = True
        self.engines: list[FakeTrtEngine] = []
        FakeTrtRuntime.last = self

    def deserialize_cuda_engine(self, data: bytes) -> FakeTrtEngine | None:
        try:
            description = json.loads(data)
        except ValueError:
            return None
        engine = FakeTrtEngine(description)
        self.engines.append(engine)
        return engine


Runtime = FakeTrtRuntime

#: The double as a module-like object to pass as ``bindings=``.
FAKE_TRT = sys.modules[__name__]


def write_fake_engine(
    folder: Path, profiles: list[dict], feature_dims: tuple[int, ...] = (3,), host_code: bool = False,
    name: str = "fake", model: str = "affine", preprocessing: dict | None = None,
) -> Path:
    """Write a double's engine file and a real trtforge sidecar beside it; return the engine path.

    ``profiles`` are ``[{input name: [min, opt, max]}]``; the input is ``[-1, *feature_dims]``.
    """
    folder.mkdir(parents=True, exist_ok=True)
    engine = folder / f"{name}.engine"
    input_name, output_names = MODELS[model]
    dims = (-1, *feature_dims)
    engine.write_text(json.dumps({"model": model, "inputs": {input_name: list(dims)}, "profiles": profiles}))
    outputs = _output_shapes(model, dims)
    sidecar = Sidecar(
        name=name, engine_file=engine.name, engine_size=engine.stat().st_size,
        engine_sha256=sha256_file(engine),
        inputs=(TensorSpec(input_name, "float32", dims),),
        outputs=tuple(TensorSpec(n, "float32", outputs[n]) for n in output_names),
        profiles=tuple({input_name: {"min": p[input_name][0], "opt": p[input_name][1], "max": p[input_name][2]}}
                       for p in profiles),
        precision={"mode": "fp32"}, builder={"flavour": "double", "host_code": host_code}, source={"kind": "onnx"},
        preprocessing=preprocessing,
    )
    write_sidecar(engine.with_suffix(".json"), sidecar)
    return engine
