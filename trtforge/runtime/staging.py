"""Host staging: reused host buffers (pinned on a GPU) and the host copies into them.

The vision predictor's pinned buffer for pageable frames and the server's joined batch of uint8
frames (through that same ``Preprocessor``) use these. A buffer only grows: batch sizes vary from
call to call, and pinning costs more than the copy itself. Pinned bytes let the upload run as a DMA
inside the route's CUDA graph.

Example:
    >>> buf = HostBuffer(torch.device("cuda", 0))
    >>> batch = buf.view((32, 224, 224, 3))                 # pinned uint8, reused by the next call
    >>> copy_rows(batch.numpy(), [request_a, request_b])    # rows after them are zeroed
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from trtforge.runtime.placement import on_device

__all__ = ["HostBuffer", "copy_rows", "host_copy"]


def host_copy(dst: np.ndarray, src: Any) -> None:
    """``dst[...] = src`` for host arrays: one ``np.copyto`` on the calling thread.

    Measured on the H200's host (bench/host_copy.py, a 1280×720 frame into pinned memory), one
    ``np.copyto`` beat the same copy split over a pool of 2 to 8 threads in two runs (238 against
    311 µs, 340 against 403 µs), and torch's own copy on its 16 intra-op threads stalls for
    milliseconds whenever a core is busy; so no threads, and no OpenMP team left spinning.

    Example:
        >>> host_copy(pinned.numpy(), frame)
    """
    np.copyto(dst, np.asarray(src))


def copy_rows(dst: np.ndarray, parts: Sequence[Any]) -> int:
    """The parts' rows one after another into ``dst``, the rows after them zeroed; returns the rows
    written, one part after another.

    Example:
        >>> copy_rows(batch, [np.ones((2, 4)), np.ones((1, 4))])
        3
    """
    starts, start = [], 0
    for part in parts:
        starts.append(start)
        start += len(part)
    if start > len(dst):
        raise ValueError(f"{start} rows do not fit a buffer of {len(dst)}")
    for at, part in zip(starts, parts, strict=True):
        host_copy(dst[at:at + len(part)], part)
    dst[start:] = 0
    return start


class HostBuffer:
    """Grow-only host bytes, pinned when ``device`` is a GPU (allocated with that GPU current).

    ``view(shape, dtype)`` is a tensor over the buffer's first bytes; its address changes only when
    the buffer grows. The next ``view`` reuses the bytes: finish with one before taking the next.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._bytes: torch.Tensor | None = None

    @property
    def pinned(self) -> bool:
        return self.device.type == "cuda"

    def view(self, shape: Sequence[int], dtype: torch.dtype = torch.uint8) -> torch.Tensor:
        nbytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
        if self._bytes is None or self._bytes.numel() < nbytes:
            with on_device(self.device):  # pinning needs a CUDA context: this device's, never GPU 0's
                self._bytes = torch.empty(nbytes, dtype=torch.uint8, pin_memory=self.pinned)
        return self._bytes[:nbytes].view(dtype).view(tuple(shape))

    def holds(self, array: Any) -> bool:
        """Whether ``array`` (NumPy or a CPU tensor) starts at this buffer's first byte."""
        if self._bytes is None:
            return False
        if isinstance(array, np.ndarray):
            return array.__array_interface__["data"][0] == self._bytes.data_ptr() and array.nbytes <= self._bytes.numel()
        return isinstance(array, torch.Tensor) and array.device.type == "cpu" and \
            array.data_ptr() == self._bytes.data_ptr()

    def release(self) -> None:
        self._bytes = None
