"""CUDA graphs: capture a call once per key (shapes, or a binding set), then replay it.

A captured call reads and writes fixed buffers. ``GraphCache`` keeps one capture per key, at most
``max_entries`` of them (least recently used go first), and frees them on ``clear()``.

Example:
    >>> cache = GraphCache(torch.device("cuda"))
    >>> static_x = torch.rand(8, 3, 224, 224, device="cuda")
    >>> out = cache.replay(("b8",), lambda: model(static_x))   # captured on the first call
    >>> static_x.copy_(next_batch); out = cache.replay(("b8",), lambda: model(static_x))  # replay
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import torch

from trtforge.core.errors import InvalidArgument, Unsupported
from trtforge.runtime.placement import TORCH_CUDA, DeviceRuntime


@dataclass
class CapturedCall:
    """One captured graph and the outputs its replay writes."""

    graph: Any  # torch.cuda.CUDAGraph
    outputs: Any


_CAPTURE_STREAMS: dict[int, Any] = {}

#: What torch and CUDA say when the model does something a capture cannot record (its warm-up calls ran): a
#: copy from pageable host memory (transformers' mask helpers make a tensor from a Python number on each call),
#: a synchronization (``.item()``, data-dependent shapes), an operation the capturing stream forbids.
CAPTURE_REFUSED = ("during CUDA graph capture", "cudaErrorStreamCapture", "operation not permitted when stream is "
                   "capturing", "operation failed due to a previous error during capture")


def capture_stream(device: torch.device) -> Any:
    """One side stream per device for every warm-up and capture.

    A fresh stream per capture would make cuBLAS/cuDNN set up a new per-stream workspace each time
    (kept for the life of the process), so memory would grow with every engine loaded.
    """
    index = device.index if device.index is not None else torch.cuda.current_device()
    stream = _CAPTURE_STREAMS.get(index)
    if stream is None:
        stream = _CAPTURE_STREAMS[index] = torch.cuda.Stream(torch.device("cuda", index))
    return stream


def capture(fn: Callable[[], Any], device: torch.device, warmup: int = 2, stream: Any = None,
            devices: DeviceRuntime = TORCH_CUDA, index: int | None = None) -> CapturedCall:
    """Run ``fn`` ``warmup`` times on ``stream`` (default: the device's side stream; lazy init,
    autotuning), then capture it there, through ``devices`` (GPU ``index``, default ``device``'s).
    Never the legacy default stream, which cannot be captured."""
    if index is None:
        if device.type != "cuda":
            raise InvalidArgument(f"CUDA graphs need a CUDA device, got {device}; use a route without graphs on CPU")
        index = device.index if device.index is not None else devices.current()
    side = stream if stream is not None else capture_stream(torch.device("cuda", index))
    try:
        graph, outputs = devices.capture(fn, index, side, warmup)
    except RuntimeError as exc:
        if not any(mark in str(exc) for mark in CAPTURE_REFUSED):
            raise
        raise Unsupported(f"the model cannot be captured in a CUDA graph: {str(exc).splitlines()[0][:200]}; "
                          "run it on route 'eager' or 'compiled', or make its forward capturable (a graph replays "
                          "fixed GPU work: no copies from unpinned host memory, no synchronization, no shapes "
                          "that depend on the data)") from exc
    return CapturedCall(graph, outputs)


class GraphCache:
    """Captured calls by key, captured on ``stream`` (default: the device's side stream) through
    ``devices`` (the CUDA runtime; GPU ``index``, default ``device``'s); replays on the current stream."""

    def __init__(self, device: torch.device, max_entries: int = 16, warmup: int = 2, stream: Any = None,
                 devices: DeviceRuntime = TORCH_CUDA, index: int | None = None) -> None:
        self.device = device
        self.stream = stream
        self.devices = devices
        self.index = index
        self.max_entries = max_entries
        self.warmup = warmup
        self._entries: OrderedDict[Hashable, CapturedCall] = OrderedDict()
        self.captures = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._entries

    def replay(self, key: Hashable, fn: Callable[[], Any]) -> Any:
        """Replay the capture for ``key``; capture ``fn`` first when the key is new."""
        entry = self._entries.get(key)
        if entry is None:
            entry = capture(fn, self.device, self.warmup, self.stream, self.devices, self.index)
            self.captures += 1
            self._entries[key] = entry
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
        else:
            self._entries.move_to_end(key)
        index = self.index if self.index is not None else self.device.index
        self.devices.replay(entry.graph, index if index is not None else self.devices.current())
        return entry.outputs

    def clear(self) -> None:
        """Drop every capture (and its memory pool)."""
        self._entries.clear()
