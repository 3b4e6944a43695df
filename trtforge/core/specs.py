"""Tensor specs shared by capture, build, sidecar and runtime.

Example:
    >>> TensorSpec("images", "float32", (-1, 3, 224, 224)).dynamic_axes
    (0,)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: ONNX elem type → numpy dtype name used in specs and sidecars.
ONNX_TO_DTYPE: dict[int, str] = {
    1: "float32", 2: "uint8", 3: "int8", 5: "int16", 6: "int32", 7: "int64",
    9: "bool", 10: "float16", 11: "float64", 16: "bfloat16",
}


@dataclass(frozen=True)
class TensorSpec:
    """A named tensor: dtype name (numpy style) and shape with -1 for dynamic dims."""

    name: str
    dtype: str
    shape: tuple[int, ...]

    @property
    def dynamic_axes(self) -> tuple[int, ...]:
        return tuple(i for i, d in enumerate(self.shape) if d < 0)

    def as_dict(self) -> dict:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape)}

    @classmethod
    def from_dict(cls, data: dict) -> TensorSpec:
        return cls(str(data["name"]), str(data["dtype"]), tuple(int(d) for d in data["shape"]))


def shape_value_candidates(values: Mapping[str, Any]) -> dict[str, list[int]]:
    """The values of the integer inputs of rank 0 or 1: those TensorRT may read as shape tensors, whose
    values it needs when it builds (and builds into the engine).

    Example:
        >>> shape_value_candidates({"x": np.zeros((2, 3), np.float32), "shape": np.array([3, 2])})
        {'shape': [3, 2]}
    """
    found = {}
    for name, value in values.items():
        array = value.detach().cpu().numpy() if hasattr(value, "detach") else value
        dtype, shape = getattr(array, "dtype", None), getattr(array, "shape", None)
        if dtype is not None and shape is not None and len(shape) <= 1 and getattr(dtype, "kind", "") in "iu":
            found[str(name)] = [int(v) for v in array.reshape(-1).tolist()]
    return found
