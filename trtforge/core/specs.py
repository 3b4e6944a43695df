"""Tensor specs shared by capture, build, sidecar and runtime.

Example:
    >>> TensorSpec("images", "float32", (-1, 3, 224, 224)).dynamic_axes
    (0,)
"""

from __future__ import annotations

from dataclasses import dataclass

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
