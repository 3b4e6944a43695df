"""``FakeTrtRefitter``: a named double of the TensorRT refit API (Runtime → engine → Refitter → serialize).

No TensorRT engine can be deserialized on this machine, so the refit logic is tested against this
double; test_refit.py also checks that every name ``trtforge.refit`` uses exists in the real
bindings, and that the double offers the same names.
"""

from __future__ import annotations

import hashlib
from types import SimpleNamespace

import numpy as np


class FakeTrtDataType:
    """Enum members with a ``name``, like ``trt.DataType``."""

    FLOAT = SimpleNamespace(name="FLOAT")
    HALF = SimpleNamespace(name="HALF")


DTYPE_OF_NUMPY = {"float32": FakeTrtDataType.FLOAT, "float16": FakeTrtDataType.HALF}


class FakeTrtLogger:
    WARNING = "WARNING"

    def __init__(self, severity=None):
        self.severity = severity


class FakeTrtWeights:
    """Holds the array without copying, like ``trt.Weights``."""

    def __init__(self, array: np.ndarray):
        self.array = array
        self.dtype = DTYPE_OF_NUMPY[str(array.dtype)]
        self.size = array.size


class FakeTrtSerializationFlag:
    EXCLUDE_WEIGHTS = "EXCLUDE_WEIGHTS"


class FakeTrtSerializationConfig:
    def __init__(self):
        self.flags = {FakeTrtSerializationFlag.EXCLUDE_WEIGHTS}

    def clear_flag(self, flag):
        self.flags.discard(flag)


class FakeTrtEngine:
    """An engine whose refittable weights are ``weights``; serialization is a digest of their values."""

    def __init__(self, weights: dict[str, np.ndarray], refittable: bool, stripped: bool):
        self.weights = dict(weights)
        self.refittable = refittable
        self.stripped = stripped
        self.serialized_with: set | None = None

    def serialize(self):
        return self._bytes(include_weights=not self.stripped)

    def create_serialization_config(self):
        return FakeTrtSerializationConfig()

    def serialize_with_config(self, config):
        self.serialized_with = set(config.flags)
        return self._bytes(include_weights=FakeTrtSerializationFlag.EXCLUDE_WEIGHTS not in config.flags)

    def _bytes(self, include_weights: bool) -> bytes:
        lines = [b"FAKE-ENGINE"]
        if include_weights:
            for name in sorted(self.weights):
                value = self.weights[name]
                lines.append(f"{name} {value.dtype} {hashlib.sha256(value.tobytes()).hexdigest()}".encode())
        return b"\n".join(lines)


class FakeTrtRefitter:
    """Records ``set_named_weights`` calls; ``refit_cuda_engine`` copies them into the engine."""

    last: FakeTrtRefitter | None = None
    fail_refit = False

    def __init__(self, engine: FakeTrtEngine, logger):
        self.engine = engine
        self.pending: dict[str, np.ndarray] = {}
        FakeTrtRefitter.last = self

    def get_all_weights(self):
        return sorted(self.engine.weights)

    def get_weights_prototype(self, name):
        return FakeTrtWeights(self.engine.weights[name])

    def set_named_weights(self, name, weights):
        proto = self.engine.weights.get(name)
        if proto is None or weights.size != proto.size or weights.array.dtype != proto.dtype:
            return False
        self.pending[name] = weights.array.copy()
        return True

    def get_missing_weights(self):
        return [n for n in self.engine.weights if n not in self.pending] if self.engine.stripped else []

    def refit_cuda_engine(self):
        if FakeTrtRefitter.fail_refit:
            return False
        self.engine.weights.update(self.pending)
        return True


def fake_trt_refit_bindings(weights: dict[str, np.ndarray], refittable: bool = True, stripped: bool = False):
    """A module-like namespace: ``Runtime(logger).deserialize_cuda_engine(plan)`` gives a FakeTrtEngine."""

    class FakeTrtRuntime:
        def __init__(self, logger):
            self.logger = logger

        def deserialize_cuda_engine(self, plan):
            return FakeTrtEngine(weights, refittable, stripped)

    return SimpleNamespace(
        Logger=FakeTrtLogger, Runtime=FakeTrtRuntime, Refitter=FakeTrtRefitter, Weights=FakeTrtWeights,
        SerializationFlag=FakeTrtSerializationFlag, DataType=FakeTrtDataType,
    )


#: Real binding class name → the double standing in for it (for the surface check).
DOUBLE_CLASSES = {
    "Logger": FakeTrtLogger, "Refitter": FakeTrtRefitter, "Weights": FakeTrtWeights,
    "ICudaEngine": FakeTrtEngine, "ISerializationConfig": FakeTrtSerializationConfig,
    "SerializationFlag": FakeTrtSerializationFlag, "DataType": FakeTrtDataType,
}
