"""Host staging: reused host buffers (pinned on a GPU) and bounded multi-threaded host copies.

Everything that moves host bytes towards a GPU goes through here: the vision predictor's pinned
buffer for pageable frames, the server's joined batch of uint8 frames, and the server's joined batch
of a model's native (float) input. A buffer only grows: batch sizes vary from call to call, and
pinning (or even first-touching fresh pages) costs more than the copy itself; a 32-row float32
224² batch is 19 MB, and ``np.empty`` of that size is a fresh mapping whose 4,700 pages fault on
first write. Pinned bytes also let the upload run as a DMA at the bus's speed.

Example:
    >>> buf = HostBuffer(torch.device("cuda", 0))
    >>> batch = buf.view((32, 3, 224, 224), torch.float32)     # pinned, reused by the next call
    >>> copy_rows(batch.numpy(), [request_a, request_b])       # rows after them are zeroed
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from trtforge.runtime.placement import on_device

__all__ = ["HOST_COPY_THREADS", "HostBuffer", "copy_rows", "host_copy"]

#: Threads of one host copy into a pinned buffer. torch's own copy takes every intra-op thread (16
#: on the H200's host), and stalls for milliseconds when one core is busy (Inductor's compile pool
#: starting, another stub process, the clients); 4 threads measured 0.026 ms against 0.019 ms for 16.
HOST_COPY_THREADS = 4
#: Below this many bytes one thread copies (handing chunks to threads would cost more).
_PARALLEL_COPY_BYTES = 1 << 20
_POOL: list[Any] = []
_POOL_LOCK = threading.Lock()


def _copy_pool() -> Any:
    from concurrent.futures import ThreadPoolExecutor

    with _POOL_LOCK:
        if not _POOL:
            _POOL.append(ThreadPoolExecutor(HOST_COPY_THREADS, thread_name_prefix="trtforge-host-copy"))
        return _POOL[0]


def host_copy(dst: np.ndarray, src: Any) -> None:
    """``dst[...] = src`` for host arrays, on at most ``HOST_COPY_THREADS`` threads (NumPy copies
    without the GIL); no OpenMP team, so no spinning threads left behind to compete for cores.

    Example:
        >>> host_copy(pinned.numpy(), frame)
    """
    src = np.asarray(src)
    if dst.nbytes < _PARALLEL_COPY_BYTES or not (dst.flags.c_contiguous and src.flags.c_contiguous) \
            or dst.shape != src.shape:
        np.copyto(dst, src)
        return
    d, s = dst.reshape(-1), src.reshape(-1)
    step = math.ceil(len(d) / HOST_COPY_THREADS)
    list(_copy_pool().map(lambda i: np.copyto(d[i:i + step], s[i:i + step]), range(0, len(d), step)))


def copy_rows(dst: np.ndarray, parts: Sequence[Any]) -> int:
    """The parts' rows one after another into ``dst``, the rows after them zeroed; returns the rows
    written. One part after another, each through ``host_copy`` (threads only for a part of 1 MiB or
    more): in a server, 4 instances' stubs and the clients already share the cores.

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

    def array(self, shape: Sequence[int], dtype: Any) -> np.ndarray:
        """``view`` as a NumPy array of ``dtype`` (any NumPy dtype, bool and float16 included)."""
        dtype = np.dtype(dtype)
        return self.view((math.prod(shape) * dtype.itemsize,)).numpy().view(dtype).reshape(tuple(shape))

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
