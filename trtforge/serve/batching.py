"""One dynamic-batcher batch: check each request alone, run the good ones together, split exactly.

Triton hands the Python backend several requests at once. A request whose tensors do not fit the
model fails alone with a message naming the problem; the others run as one engine call, and each
gets back exactly its own rows.

Example:
    >>> checked = check_request(specs, {"x": np.zeros((2, 4), np.float32)}, max_batch=8)
    >>> checked.rows
    2
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from trtforge.core.errors import InvalidArgument
from trtforge.core.specs import TensorSpec


class BadRequest(InvalidArgument):
    """A request's tensors do not fit the model (names, dtype, shape, batch size)."""


@dataclass(frozen=True)
class Checked:
    """A request that fits: its arrays in input order and its row count."""

    arrays: tuple[np.ndarray, ...]
    rows: int


def max_shapes(profiles: Sequence[Mapping[str, Mapping[str, Sequence[int]]]]) -> dict[str, tuple[int, ...]]:
    """Per input, the largest size of each dim over the profiles: what bounds a request's size."""
    limits: dict[str, tuple[int, ...]] = {}
    for profile in profiles:
        for name, ranges in profile.items():
            top = tuple(int(d) for d in ranges["max"])
            limits[name] = tuple(map(max, limits[name], top)) if name in limits else top
    return limits


def _check_tensor(spec: TensorSpec, value: np.ndarray, batched: bool, limit: Sequence[int] | None) -> None:
    if value.dtype != np.dtype(spec.dtype):
        raise BadRequest(f"input {spec.name!r} is {value.dtype}; the model takes {spec.dtype}")
    want = spec.shape if not batched else (-1, *spec.shape[1:])
    if len(value.shape) != len(want) or any(w >= 0 and w != d for w, d in zip(want, value.shape, strict=True)):
        raise BadRequest(f"input {spec.name!r} has shape {list(value.shape)}; the model takes "
                         f"{list(want)} (-1: any size)")
    if limit is not None and len(limit) == len(value.shape) and \
            any(d > m for d, m in zip(value.shape[1:], limit[1:], strict=True)):
        raise BadRequest(f"input {spec.name!r} has shape {list(value.shape)}, beyond the profile's largest "
                         f"{list(limit)}; send smaller tensors")


def check_request(specs: Sequence[TensorSpec], tensors: Mapping[str, np.ndarray], max_batch: int,
                  limits: Mapping[str, Sequence[int]] | None = None) -> Checked:
    """Check one request against the model's inputs (and the profiles' ``limits``); raises BadRequest."""
    names = [s.name for s in specs]
    if sorted(tensors) != sorted(names):
        raise BadRequest(f"request has inputs {sorted(tensors)}; the model takes {names}")
    batched = max_batch > 0
    for spec in specs:
        _check_tensor(spec, tensors[spec.name], batched, (limits or {}).get(spec.name))
    rows = {tensors[n].shape[0] for n in names} if batched else {1}
    if len(rows) != 1:
        raise BadRequest(f"inputs disagree on the batch size ({sorted(rows)}); give every input the same rows")
    count = rows.pop()
    if batched and not 1 <= count <= max_batch:
        raise BadRequest(f"batch of {count} rows; the model takes 1 to {max_batch}")
    return Checked(tuple(np.ascontiguousarray(tensors[n]) for n in names), count)


def graph_buckets(max_batch: int) -> tuple[int, ...]:
    """Batch sizes a CUDA-graph engine is called with: powers of two up to ``max_batch``, and ``max_batch``.

    An engine that captures one graph per batch size would otherwise capture (and evict from its
    16-entry cache) a graph for every size the dynamic batcher happens to form.

    Example:
        >>> graph_buckets(48)
        (1, 2, 4, 8, 16, 32, 48)
    """
    sizes = {1 << i for i in range(max(1, max_batch).bit_length()) if 1 << i <= max_batch}
    return tuple(sorted(sizes | {max_batch})) if max_batch > 0 else ()


def padded_rows(rows: int, buckets: Sequence[int]) -> int:
    """The smallest bucket that holds ``rows`` (``rows`` itself without buckets)."""
    return next((b for b in buckets if b >= rows), rows)


def _join(parts: Sequence[np.ndarray], rows: int) -> np.ndarray:
    """The requests' rows in one array of ``rows`` rows (zeros after them): one copy, padding included."""
    if len(parts) == 1 and parts[0].shape[0] == rows:
        return parts[0]
    joined = np.empty((rows, *parts[0].shape[1:]), dtype=parts[0].dtype)
    start = 0
    for part in parts:
        joined[start:start + len(part)] = part
        start += len(part)
    joined[start:] = 0
    return joined


def run_together(engine_call: Callable[..., Mapping[str, Any]], checked: Sequence[Checked],
                 output_names: Sequence[str], batched: bool,
                 buckets: Sequence[int] = ()) -> list[dict[str, np.ndarray]]:
    """One engine call for all ``checked`` requests (padded to a bucket size when ``buckets`` are
    given); each gets its own rows of every output."""
    if not batched:
        return [_to_numpy(engine_call(*c.arrays), output_names) for c in checked]
    total = sum(c.rows for c in checked)
    rows = padded_rows(total, buckets)
    joined = [_join(parts, rows) for parts in zip(*(c.arrays for c in checked), strict=True)]
    outputs = _to_numpy(engine_call(*joined), output_names)
    for name, value in outputs.items():
        if value.shape[0] != rows:
            raise InvalidArgument(f"output {name!r} has {value.shape[0]} rows for {rows} input rows; "
                                  "the engine does not keep the batch axis")
    results, start = [], 0
    for c in checked:
        results.append({n: np.ascontiguousarray(v[start:start + c.rows]) for n, v in outputs.items()})
        start += c.rows
    return results


def _to_numpy(outputs: Mapping[str, Any], names: Sequence[str]) -> dict[str, np.ndarray]:
    missing = [n for n in names if n not in outputs]
    if missing:
        raise InvalidArgument(f"the engine returned no output(s) {missing}")
    result = {}
    for name in names:
        value = outputs[name]
        result[name] = value.detach().cpu().numpy() if hasattr(value, "detach") else np.asarray(value)
    return result
