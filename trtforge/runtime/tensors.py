"""Turning call arguments into tensors an engine can bind: dtype, device and layout checks.

Rules shared by the routes:

- a torch tensor already on the engine's device is used as it is (bound by pointer, no copy);
  it must have the spec's dtype and be contiguous;
- a numpy array or a CPU tensor is copied to the engine's device, explicitly, once;
- a tensor on another device is refused with a message that names the fix, or moved when the
  engine was loaded with ``move_inputs=True`` (``trtforge.runtime.placement`` holds the rule);
- a wrong dtype or any other type is refused with a message that names the fix.

Example:
    >>> spec = TensorSpec("x", "float32", (-1, 3))
    >>> bind_input(spec, np.zeros((2, 3), np.float32), torch.device("cpu")).shape
    torch.Size([2, 3])
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import numpy as np
import torch

from trtforge.core.errors import InvalidArgument
from trtforge.core.specs import TensorSpec
from trtforge.runtime.placement import Placement, placement, refusal
from trtforge.runtime.profiles import check_rank_and_dims
from trtforge.runtime.protocol import EngineInputError

_TORCH_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
    "float64": torch.float64, "int8": torch.int8, "uint8": torch.uint8, "int16": torch.int16,
    "int32": torch.int32, "int64": torch.int64, "bool": torch.bool,
}
#: Spec dtypes a route can bind as torch tensors (TensorRT's FP8/INT4 I/O cannot be).
BINDABLE_DTYPES: frozenset[str] = frozenset(_TORCH_DTYPES)


def torch_dtype(name: str) -> torch.dtype:
    """Spec dtype name (numpy style) → torch dtype."""
    try:
        return _TORCH_DTYPES[name]
    except KeyError:
        raise InvalidArgument(f"dtype {name!r} has no torch equivalent; known: {sorted(_TORCH_DTYPES)}") from None


def dtype_name(dtype: torch.dtype) -> str:
    """torch dtype → spec dtype name."""
    for name, value in _TORCH_DTYPES.items():
        if value == dtype:
            return name
    raise InvalidArgument(f"torch dtype {dtype} has no spec name")


def bind_input(spec: TensorSpec, value: Any, device: torch.device, move_inputs: bool = False) -> torch.Tensor:
    """Check ``value`` against ``spec`` and return a tensor on ``device`` (no copy when possible)."""
    want = torch_dtype(spec.dtype)
    if isinstance(value, np.ndarray):
        if spec.dtype == "bfloat16" or value.dtype != np.dtype(spec.dtype):
            raise EngineInputError(
                f"input {spec.name!r} is a numpy {value.dtype} array; the engine expects {spec.dtype}. "
                f"Convert it first, e.g. x.astype(np.{spec.dtype})"
            )
        check_rank_and_dims(spec, value.shape)
        # ``np.ascontiguousarray`` would turn a rank-0 array into shape (1,).
        return torch.from_numpy(value if value.flags.c_contiguous else value.copy()).to(device)
    if not isinstance(value, torch.Tensor):
        raise EngineInputError(
            f"input {spec.name!r} is a {type(value).__name__}; pass a torch.Tensor or a numpy array "
            f"of dtype {spec.dtype}"
        )
    if value.requires_grad:  # engines run inference only; a tensor that requires grad is read as is
        value = value.detach()
    if value.dtype != want:
        raise EngineInputError(
            f"input {spec.name!r} has dtype {value.dtype}; the engine expects {want}. Convert it with "
            f"x.to({want})"
        )
    check_rank_and_dims(spec, value.shape)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    rule = placement(value.device, device, move_inputs)
    if rule is Placement.USE:
        if not value.is_contiguous():
            raise EngineInputError(
                f"input {spec.name!r} is not contiguous (strides {list(value.stride())}); the engine "
                "binds it by pointer. Call x.contiguous() first"
            )
        return value
    if rule is Placement.REFUSE:
        raise refusal(spec.name, value.device, device)
    return value.contiguous().to(device)


def bind_inputs(specs: Sequence[TensorSpec], values: Sequence[Any], device: torch.device, move_inputs: bool,
                shape_inputs: Collection[str]) -> list[torch.Tensor | np.ndarray]:
    """Each input checked: those named in ``shape_inputs`` as host arrays of their values
    (``shape_values``), the rest as tensors on ``device`` (``bind_input``).

    Example:
        >>> bind_inputs(engine.inputs, [x, [3, 2]], device, False, {"shape"})   # [tensor on device, array([3, 2])]
    """
    return [shape_values(spec, value) if spec.name in shape_inputs else bind_input(spec, value, device, move_inputs)
            for spec, value in zip(specs, values, strict=True)]


def shape_values(spec: TensorSpec, value: Any) -> np.ndarray:
    """The values of a shape-tensor input (one whose values set shapes, e.g. a Reshape's shape) as a
    contiguous host array of the spec's integer dtype.

    They may come as a torch tensor on any device (read back to the host: TensorRT and ONNX Runtime
    read them there), a numpy array, or a list or tuple of ints.

    Example:
        >>> shape_values(TensorSpec("shape", "int64", (2,)), [3, 2])
        array([3, 2])
    """
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    elif isinstance(value, list | tuple):
        value = np.asarray(value)
    if not isinstance(value, np.ndarray) or value.dtype.kind not in "iu":
        kind = value.dtype if isinstance(value, np.ndarray) else type(value).__name__
        raise EngineInputError(
            f"input {spec.name!r} sets shapes (a shape tensor) and got {kind}; pass its integer values as a "
            f"list, a numpy array or a torch tensor, e.g. [3, 2]")
    check_rank_and_dims(spec, value.shape)
    want = np.dtype(spec.dtype)
    if not np.can_cast(value.dtype, want) and np.any(value.astype(np.int64) != value.astype(want)):
        raise EngineInputError(f"input {spec.name!r} has values {value.tolist()} that do not fit {spec.dtype}, "
                               "the engine's type for it; pass smaller values")
    return np.ascontiguousarray(value, dtype=want)
