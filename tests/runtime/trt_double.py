"""A test double of TensorRT's runtime API (``FakeTrtRuntime``, ``FakeTrtEngine``, ``FakeTrtContext``).

It is NOT TensorRT. It stands in for the bindings so the real ``TensorRTEngine`` code (binding by
pointer, profile choice, output trimming, refusals) runs on a machine that cannot run engines.
It works on host memory (``RUNS_ON_HOST_MEMORY``): a "kernel" reads its inputs and writes its
outputs through the raw addresses the route bound, so a wrong or stale pointer gives wrong numbers.

The "engine file" is JSON: ``{"inputs": {name: [dims]}, "profiles": [{name: [min, opt, max]}]}``.
The double computes ``y = 2 * x + 1`` (same shape as ``x``) and ``total = x.sum(axis=1..)`` (shape
``[batch]``), for one float32 input ``x``.
"""

from __future__ import annotations

import ctypes
import enum
import json
import sys
from pathlib import Path

import numpy as np

from trtforge.core.sidecar import Sidecar, sha256_file, write_sidecar
from trtforge.core.specs import TensorSpec

RUNS_ON_HOST_MEMORY = True


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


class FakeTrtContext:
    """Records what the route asked for, and runs the double's kernel through raw addresses."""

    def __init__(self, engine: FakeTrtEngine) -> None:
        self.engine = engine
        self.profile = 0
        self.input_shapes: dict[str, tuple[int, ...]] = {}
        self.addresses: dict[str, int] = {}
        self.calls: list[tuple] = []

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
        x = self.input_shapes["x"]
        return {"x": x, "y": x, "total": (x[0],)}[name]

    @staticmethod
    def _view(address: int, shape: tuple[int, ...]) -> np.ndarray:
        pointer = ctypes.cast(address, ctypes.POINTER(ctypes.c_float))
        return np.ctypeslib.as_array(pointer, shape=shape)

    def execute_async_v3(self, stream: int) -> bool:
        self.calls.append(("execute_async_v3", stream))
        x = self._view(self.addresses["x"], self.input_shapes["x"])
        y = self._view(self.addresses["y"], self.get_tensor_shape("y"))
        total = self._view(self.addresses["total"], self.get_tensor_shape("total"))
        y[...] = 2 * x + 1
        total[...] = x.reshape(x.shape[0], -1).sum(axis=1)
        return True


class FakeTrtEngine:
    def __init__(self, description: dict) -> None:
        self.description = description
        self.contexts: list[FakeTrtContext] = []
        self.num_optimization_profiles = len(description["profiles"])
        self.num_io_tensors = 3

    def get_tensor_name(self, index: int) -> str:
        return ("x", "y", "total")[index]

    def get_tensor_mode(self, name: str) -> TensorIOMode:
        return TensorIOMode.INPUT if name == "x" else TensorIOMode.OUTPUT

    def get_tensor_dtype(self, name: str) -> DataType:
        return DataType.FLOAT

    def get_tensor_shape(self, name: str) -> tuple[int, ...]:
        x = tuple(self.description["inputs"]["x"])
        return {"x": x, "y": x, "total": (-1,)}[name]

    def get_tensor_profile_shape(self, name: str, profile: int):
        return tuple(tuple(d) for d in self.description["profiles"][profile][name])

    def create_execution_context(self) -> FakeTrtContext:
        context = FakeTrtContext(self)
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
    name: str = "fake",
) -> Path:
    """Write a double's engine file and a real trtforge sidecar beside it; return the engine path."""
    folder.mkdir(parents=True, exist_ok=True)
    engine = folder / f"{name}.engine"
    description = {"inputs": {"x": [-1, *feature_dims]}, "profiles": profiles}
    engine.write_text(json.dumps(description))
    sidecar = Sidecar(
        name=name, engine_file=engine.name, engine_size=engine.stat().st_size,
        engine_sha256=sha256_file(engine),
        inputs=(TensorSpec("x", "float32", (-1, *feature_dims)),),
        outputs=(TensorSpec("y", "float32", (-1, *feature_dims)), TensorSpec("total", "float32", (-1,))),
        profiles=tuple({"x": {"min": p["x"][0], "opt": p["x"][1], "max": p["x"][2]}} for p in profiles),
        precision={"mode": "fp32"}, builder={"flavour": "double", "host_code": host_code}, source={"kind": "onnx"},
    )
    write_sidecar(engine.with_suffix(".json"), sidecar)
    return engine
