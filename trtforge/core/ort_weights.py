"""Large initializers handed to ONNX Runtime once, shared by every session that analyses the same weights.

Calibration, sensitivity ranking and accuracy reports open one ONNX Runtime session per candidate graph,
and the candidates differ in a few tensors only. Serialising a 90 MB encoder for each one, and parsing it
back, cost about 0.5 s a session (all-MiniLM-L6-v2: 18 s of a 47 s auto-precision placement went to
``SerializeToString``). Here each initializer of at least :data:`SHARED_BYTES` leaves the serialised graph
as an external-data reference and reaches the session through ``SessionOptions.add_external_initializers``
as an ``OrtValue``, made once per distinct content (sha1 of its bytes) and kept in a small LRU.

ONNX Runtime reads an external initializer's buffer in place for the whole life of the session, so the
session holds its values (:class:`SharedWeightsSession`); the LRU only saves the copies.

Example:
    >>> proto = onnx.load("encoder.onnx")
    >>> values = share_large_initializers(proto)   # proto's big tensors now point at ``values``
    >>> sorted(values)[:1]
    ['encoder.layer.0.attention.self.key.weight']
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict

import numpy as np
import onnx
import onnxruntime as ort

#: An initializer this large (bytes) or larger goes to ONNX Runtime as a shared OrtValue.
SHARED_BYTES = 1 << 20
#: The LRU of OrtValues made so far is trimmed to this many bytes (sessions keep their own values alive).
CACHE_BYTES = 512 << 20
#: ONNX tensor types whose raw bytes NumPy reads as they are (the others stay inside the graph).
_NUMPY = {onnx.TensorProto.FLOAT: np.float32, onnx.TensorProto.FLOAT16: np.float16,
          onnx.TensorProto.DOUBLE: np.float64, onnx.TensorProto.INT8: np.int8, onnx.TensorProto.UINT8: np.uint8,
          onnx.TensorProto.INT32: np.int32, onnx.TensorProto.INT64: np.int64}

_values: OrderedDict[tuple, tuple[ort.OrtValue, int]] = OrderedDict()
_lock = threading.Lock()


class SharedWeightsSession(ort.InferenceSession):
    """An InferenceSession that keeps the OrtValues it reads its large initializers from."""

    def __init__(self, model: bytes | str, options: ort.SessionOptions, initializers: dict[str, ort.OrtValue],
                 **kwargs) -> None:
        self.shared_initializers = initializers  # read in place by ONNX Runtime while the session lives
        super().__init__(model, options, **kwargs)


def share_large_initializers(proto: onnx.ModelProto) -> dict[str, ort.OrtValue]:
    """Move ``proto``'s large main-graph initializers out to OrtValues (``proto`` is changed: pass a copy).

    Returns name → value, for ``SessionOptions.add_external_initializers``.
    """
    shared: dict[str, ort.OrtValue] = {}
    for tensor in proto.graph.initializer:
        dtype = _NUMPY.get(tensor.data_type)
        if dtype is None or tensor.data_location == onnx.TensorProto.EXTERNAL or not tensor.HasField("raw_data"):
            continue
        raw = tensor.raw_data
        if len(raw) < SHARED_BYTES:
            continue
        digest = hashlib.sha1(raw, usedforsecurity=False).hexdigest()
        shared[tensor.name] = _value((tensor.data_type, tuple(tensor.dims), digest), raw, dtype, tuple(tensor.dims))
        tensor.ClearField("raw_data")
        tensor.data_location = onnx.TensorProto.EXTERNAL
        entry = tensor.external_data.add()
        entry.key, entry.value = "location", f"trtforge-shared-{digest}"  # never read: the session is given it
    return shared


def _value(key: tuple, raw: bytes, dtype: type, dims: tuple[int, ...]) -> ort.OrtValue:
    with _lock:
        if key in _values:
            _values.move_to_end(key)
            return _values[key][0]
    value = ort.OrtValue.ortvalue_from_numpy(np.frombuffer(raw, dtype=dtype).reshape(dims))
    with _lock:
        _values[key] = (value, len(raw))
        total = sum(size for _, size in _values.values())
        while total > CACHE_BYTES and len(_values) > 1:
            _, (_, size) = _values.popitem(last=False)
            total -= size
    return value
