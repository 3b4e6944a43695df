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
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from trtforge.runtime.placement import on_device

__all__ = ["BATCH_COPY_THREADS", "HostBuffer", "copy_frames", "copy_rows", "host_copy"]


#: Threads of each frame's copy when a call stages several frames. Measured on the H200's host
#: (docs/benchmarks.md, issue 26): one 1280×720 frame copies faster with one ``np.copyto`` than split
#: over a pool (predictor at batch 1: 1.70× the model alone against 1.92×), while 8 frames (22 MB)
#: copy faster split (batch 8: 4.2× against 5.5× plain). torch's own copy on its 16 intra-op threads
#: stalls for milliseconds whenever a core is busy, so it is not used.
BATCH_COPY_THREADS = 4
_POOL: list[Any] = []
_POOL_LOCK = threading.Lock()


def _copy_pool() -> Any:
    from concurrent.futures import ThreadPoolExecutor

    with _POOL_LOCK:
        if not _POOL:
            _POOL.append(ThreadPoolExecutor(BATCH_COPY_THREADS, thread_name_prefix="trtforge-host-copy"))
        return _POOL[0]


def host_copy(dst: np.ndarray, src: Any, threads: int = 1) -> None:
    """``dst[...] = src`` for host arrays: one ``np.copyto``, or (``threads`` > 1, contiguous arrays of
    the same shape) that many bands on the copy pool (NumPy copies without the GIL).

    Example:
        >>> host_copy(pinned.numpy(), frame)
    """
    src = np.asarray(src)
    threads = min(threads, BATCH_COPY_THREADS)
    if threads <= 1 or not (dst.flags.c_contiguous and src.flags.c_contiguous) or dst.shape != src.shape:
        np.copyto(dst, src)
        return
    d, s = dst.reshape(-1), src.reshape(-1)
    step = math.ceil(len(d) / threads)
    list(_copy_pool().map(lambda i: np.copyto(d[i:i + step], s[i:i + step]), range(0, len(d), step)))


def copy_frames(dst: np.ndarray, frames: Sequence[Any]) -> None:
    """Frames ``i`` into ``dst[i]`` (a list of frames, or a (B, H, W, 3) array): one frame in one
    ``np.copyto``, several each on ``BATCH_COPY_THREADS`` bands (see there for the measurements)."""
    threads = BATCH_COPY_THREADS if len(frames) > 1 else 1
    for i, frame in enumerate(frames):
        host_copy(dst[i], frame, threads)


def copy_rows(dst: np.ndarray, parts: Sequence[Any]) -> int:
    """The parts' rows one after another into ``dst``, the rows after them zeroed; returns the rows
    written, one part after another.

    Example:
        >>> copy_rows(batch, [np.ones((2, 4)), np.ones((1, 4))])
        3
    """
    rows = sum(len(part) for part in parts)
    if rows > len(dst):
        raise ValueError(f"{rows} rows do not fit a buffer of {len(dst)}")
    start = 0
    for part in parts:
        host_copy(dst[start:start + len(part)], part)
        start += len(part)
    dst[rows:] = 0
    return rows


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
