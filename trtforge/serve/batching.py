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

#: Whether a host array lies in page-locked memory (``trtforge.serve.pinning.HostRegistry.pinned``).
Pin = Callable[[np.ndarray], bool]


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


def _dtype(value: Any) -> str:
    """A NumPy array's or torch tensor's dtype by its spec name ("float32", "uint8", ...)."""
    return str(value.dtype).removeprefix("torch.")


def _on_device(value: Any) -> bool:
    return not isinstance(value, np.ndarray) and getattr(value, "is_cuda", False)


def gpu_rows(checked: Sequence[Checked]) -> int:
    """Rows of the requests whose inputs arrived on the GPU (CUDA shared memory, taken through DLPack)."""
    return sum(c.rows for c in checked if any(_on_device(a) for a in c.arrays))


def _check_tensor(spec: TensorSpec, value: Any, batched: bool, limit: Sequence[int] | None) -> None:
    if _dtype(value) != spec.dtype:
        raise BadRequest(f"input {spec.name!r} is {_dtype(value)}; the model takes {spec.dtype}")
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
    return Checked(tuple(np.ascontiguousarray(tensors[n]) if isinstance(tensors[n], np.ndarray)
                         else tensors[n].contiguous() for n in names), count)


def graph_buckets(max_batch: int, preferred: Sequence[int] = ()) -> tuple[int, ...]:
    """Batch sizes a CUDA-graph engine is called with: the dynamic batcher's ``preferred`` sizes
    (``trtforge.serve.repository.preferred_sizes``), ``max_batch``, and the powers of two below the
    smallest preferred size; without preferred sizes, powers of two up to ``max_batch``.

    An engine that captures one graph per batch size would otherwise capture (and evict from its
    16-entry cache) a graph for every size the dynamic batcher happens to form. The batcher sends
    the largest preferred size it can form, so under load a batch needs no padding; below the
    smallest preferred size it pads to the next power of two.

    Example:
        >>> graph_buckets(32, preferred=(8, 16, 24, 32)), graph_buckets(48)
        ((1, 2, 4, 8, 16, 24, 32), (1, 2, 4, 8, 16, 32, 48))
    """
    if max_batch <= 0:
        return ()
    sizes = {b for b in preferred if 0 < b <= max_batch} | {max_batch}
    sizes |= {1 << i for i in range(max_batch.bit_length()) if 1 << i < min(sizes)}
    return tuple(sorted(sizes))


def padded_rows(rows: int, buckets: Sequence[int]) -> int:
    """The smallest bucket that holds ``rows`` (``rows`` itself without buckets)."""
    return next((b for b in buckets if b >= rows), rows)


def _device_of(engine: Any) -> Any:
    """The engine's CUDA device as a ``torch.device``, or None (a CPU engine, or none named)."""
    from trtforge.runtime.protocol import PlacedEngine

    device = engine.device if isinstance(engine, PlacedEngine) else None
    if not str(device).startswith("cuda"):
        return None
    import torch

    return torch.device(device)


def _upload(parts: Sequence[np.ndarray], rows: int, device: Any, pin: Pin | None = None) -> Any:
    """Host rows straight into one new tensor of ``rows`` rows on ``device``, a request at a time,
    the padding rows zeroed there: no join on the host, and no padding bytes over the bus.

    A part that ``pin`` says lies in page-locked memory (Triton's shared memory, registered by
    ``trtforge.serve.pinning``) goes by one DMA; any other from pageable memory (the driver stages
    it first). Either way the requests' arrays may go as soon as this returns: a pageable copy
    returns once staged, and the DMAs are waited for."""
    import torch

    from trtforge.runtime.placement import on_device

    first = parts[0]
    dma = False
    with on_device(device):  # the copies and the engine's replay share that device's current stream
        joined = torch.empty((rows, *first.shape[1:]), dtype=torch.from_numpy(first[:0]).dtype, device=device)
        start = 0
        for part in parts:
            part = np.ascontiguousarray(part)
            dma = (pin is not None and pin(part)) or dma
            joined[start:start + len(part)].copy_(torch.from_numpy(part), non_blocking=True)
            start += len(part)
        if start < rows:
            joined[start:].zero_()
        if dma:
            torch.cuda.current_stream(device).synchronize()
    return joined


def _join(parts: Sequence[Any], rows: int, device: Any = None, pin: Pin | None = None) -> Any:
    """The requests' rows in one array of ``rows`` rows (zeros after them): one copy, padding included.
    Host rows for an engine on a CUDA ``device`` are uploaded into one tensor there (``_upload``).

    For a host array, a new one per batch: joining a float32 batch into one reused pinned buffer
    instead measured no faster on the H200 (docs/benchmark-history.md, issue 26)."""
    host = all(isinstance(p, np.ndarray) for p in parts)
    if host and device is not None:
        return _upload(parts, rows, device, pin)
    if len(parts) == 1 and parts[0].shape[0] == rows:
        return parts[0]
    if not host:  # torch tensors (DLPack): joined on their device
        import torch

        device = next((p.device for p in parts if _on_device(p)), torch.device("cpu"))
        joined = torch.cat([torch.as_tensor(p).to(device) for p in parts])
        pad = rows - len(joined)
        return torch.cat([joined, joined.new_zeros((pad, *joined.shape[1:]))]) if pad else joined
    joined = np.empty((rows, *parts[0].shape[1:]), dtype=parts[0].dtype)
    from trtforge.runtime.staging import copy_rows

    copy_rows(joined, parts)
    return joined


def run_together(engine_call: Callable[..., Mapping[str, Any]], checked: Sequence[Checked],
                 output_names: Sequence[str], batched: bool,
                 buckets: Sequence[int] = (), *, with_padding: bool = False, pin: Pin | None = None) -> Any:
    """One engine call for all ``checked`` requests (padded to a bucket size when ``buckets`` are
    given); each gets its own rows of every output. ``with_padding``: also the padded row count.
    ``pin(array)``: whether a host array may go to the engine's GPU by DMA (``_upload``).

    A ``runtime.protocol.JoiningEngine`` (``FrameEngine``) joins its one input itself (into
    its pinned buffer: one copy). Outputs are NumPy, except when the inputs came on the GPU: then
    outputs the engine leaves on the GPU stay there (for DLPack).
    """
    if not batched:
        results = [_outputs(engine_call(*c.arrays), output_names, False) for c in checked]
        return (results, 0) if with_padding else results
    total = sum(c.rows for c in checked)
    rows = padded_rows(total, buckets)
    columns = list(zip(*(c.arrays for c in checked), strict=True))
    from trtforge.runtime.protocol import JoiningEngine

    joining = isinstance(engine_call, JoiningEngine) and len(columns) == 1
    joined = engine_call.join(columns[0], rows) if joining else None
    engine_device = _device_of(engine_call) if joined is None else None
    joined = [joined] if joined is not None else [_join(parts, rows, engine_device, pin) for parts in columns]
    device = any(_on_device(p) for parts in columns for p in parts)  # host requests get host outputs
    outputs = _outputs(engine_call(*joined), output_names, device)
    for name, value in outputs.items():
        if value.shape[0] != rows:
            raise InvalidArgument(f"output {name!r} has {value.shape[0]} rows for {rows} input rows; "
                                  "the engine does not keep the batch axis")
    results, start = [], 0
    for c in checked:
        results.append({n: np.ascontiguousarray(v[start:start + c.rows]) if isinstance(v, np.ndarray)
                        else v[start:start + c.rows].contiguous() for n, v in outputs.items()})
        start += c.rows
    return (results, rows - total) if with_padding else results


def _outputs(outputs: Mapping[str, Any], names: Sequence[str], keep_device: bool) -> dict[str, Any]:
    """The engine's outputs as NumPy; with ``keep_device``, GPU tensors stay where they are."""
    missing = [n for n in names if n not in outputs]
    if missing:
        raise InvalidArgument(f"the engine returned no output(s) {missing}")
    result = {}
    for name in names:
        value = outputs[name]
        if keep_device and _on_device(value):
            result[name] = value.detach()
        elif hasattr(value, "detach"):
            result[name] = value.detach().cpu().numpy()
        else:
            result[name] = np.asarray(value)
    return result
