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

import ctypes
import itertools
import logging
import math
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch

from trtforge.runtime.placement import on_device

__all__ = ["BAND_MIN_BYTES", "BATCH_COPY_THREADS", "HostBuffer", "InPlace", "PinnedInPlace", "copy_frames", "copy_rows", "host_copy"]

log = logging.getLogger(__name__)


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


#: A frame smaller than this is never split into bands: handing a band to the pool costs more than
#: copying it (a (32, 224, 224, 3) batch split 4 ways per frame ran at 0.24× one ``np.copyto`` on the
#: H200's host: 3.3 k against 13.6 k img/s offline, docs/benchmark-history.md).
BAND_MIN_BYTES = 1 << 20


def copy_frames(dst: np.ndarray, frames: Sequence[Any]) -> None:
    """Frames ``i`` into ``dst[i]`` (a list of frames, or a (B, H, W, 3) array): one frame in one
    ``np.copyto``; several large frames (``BAND_MIN_BYTES``) each on ``BATCH_COPY_THREADS`` bands (see
    there for the measurements); a batch array of small frames in one ``np.copyto``."""
    if len(frames) == 0:
        return
    large = np.asarray(frames[0]).nbytes >= BAND_MIN_BYTES
    if not (len(frames) > 1 and large) and isinstance(frames, np.ndarray) and frames.shape == dst.shape:
        np.copyto(dst, frames)
        return
    threads = BATCH_COPY_THREADS if len(frames) > 1 and large else 1
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


#: At most this many caller arrays, and this many bytes of them, stay pinned in place (each pin locks
#: the caller's pages in RAM); the least recently used is unpinned first. Smaller arrays are copied.
PIN_IN_PLACE_ARRAYS = 32
PIN_IN_PLACE_BYTES = 1 << 30
PIN_IN_PLACE_MIN_BYTES = 1 << 16
_SEEN, _PINNED, _REFUSED = "seen", "pinned", "refused"


def libcudart() -> ctypes.CDLL:
    """The CUDA runtime library torch loaded, found by its soname (``OSError`` where there is none):
    for the calls ``torch.cuda.cudart()`` does not offer."""
    return ctypes.CDLL(f"libcudart.so.{(torch.version.cuda or '0').split('.')[0]}")


def _clear_cuda_error() -> None:
    """A failed runtime call leaves its error for the next check, which torch makes after a kernel
    launch: read it here."""
    try:
        libcudart().cudaGetLastError()
    except (OSError, AttributeError) as exc:
        log.warning("could not clear the CUDA error of a failed cudaHostRegister (%s)", exc)


def cuda_register(address: int, nbytes: int) -> bool:
    """``cudaHostRegister`` (portable: every GPU's DMA may read the pages); False when refused, or
    when this torch has no CUDA runtime to ask (the caller then copies: slower, never wrong)."""
    try:
        code = int(torch.cuda.cudart().cudaHostRegister(address, nbytes, 1))
    except (AssertionError, AttributeError, RuntimeError) as exc:  # a CPU-only torch, or no such binding
        log.debug("cudaHostRegister unavailable (%s): copying instead", exc)
        return False
    if code:
        _clear_cuda_error()
        log.debug("cudaHostRegister refused %d bytes at %#x (error %d): copying instead", nbytes, address, code)
    return code == 0


def cuda_unregister(address: int) -> None:
    code = int(torch.cuda.cudart().cudaHostUnregister(address))
    if code:
        _clear_cuda_error()
        log.debug("cudaHostUnregister(%#x) failed with error %d", address, code)


@dataclass
class _Pin:
    ref: weakref.ref
    address: int
    nbytes: int
    state: str = _SEEN
    serial: int = 0  # this registration's number: never reused, so a graph keyed by it never outlives it


_SERIALS = itertools.count(1)


class InPlace(NamedTuple):
    """A caller's array pinned in place: the array, its first byte's address, its registration's number."""

    array: np.ndarray
    address: int
    serial: int

    @property
    def tensor(self) -> torch.Tensor:
        """A CPU tensor over the array's own (pinned) bytes."""
        return torch.from_numpy(self.array)


def _owner(array: Any) -> np.ndarray | None:
    """The NumPy array that owns ``array``'s bytes, when NumPy allocated them and they may be pinned."""
    if type(array) is not np.ndarray:
        return None
    owner = array
    while isinstance(owner.base, np.ndarray):
        owner = owner.base
    ok = owner.base is None and owner.flags.owndata and owner.flags.writeable
    return owner if ok and owner.nbytes >= PIN_IN_PLACE_MIN_BYTES else None


class PinnedInPlace:
    """The caller's own NumPy arrays pinned where they are (``cudaHostRegister``) from their second
    upload on, so a decoder that fills the same few arrays frame after frame gets them uploaded by
    DMA, as from ``frame_buffer()``, without the host memcpy into our buffer.

    One-off arrays (a new array per frame) are never pinned: pinning costs more than one copy. The
    owning array is pinned whole, so views of it (``frames[i]``) share the pin. An owner is unpinned
    when it is collected (a weak reference's callback, which NumPy runs before it frees the bytes), or
    when newer pins push it past ``max_arrays``/``max_bytes`` (an array unpinned that way is copied from
    then on, so arrays that take turns never pin and unpin on every call). Uploads from pinned
    arrays are asynchronous: the owner (a Preprocessor) synchronizes before its call returns.

    Example:
        >>> pins = PinnedInPlace()
        >>> pins.pin(frame) is None                # first sighting: copied as before
        >>> pins.pin(frame).tensor.is_pinned()     # second: the caller's pages, pinned
    """

    def __init__(self, register: Callable[[int, int], bool] = cuda_register,
                 unregister: Callable[[int], None] = cuda_unregister, *,
                 max_arrays: int = PIN_IN_PLACE_ARRAYS, max_bytes: int = PIN_IN_PLACE_BYTES) -> None:
        self._register, self._unregister = register, unregister
        self.max_arrays, self.max_bytes = max_arrays, max_bytes
        self._pins: OrderedDict[int, _Pin] = OrderedDict()
        self._lock = threading.RLock()  # a collection inside a call runs _gone on this thread

    def pin(self, array: Any) -> InPlace | None:
        """``array`` with its address and registration number when its bytes are pinned in place
        (pinning them if this is their second sighting), else None: stage it.

        A CUDA graph that captured the DMA from the array stays valid while its ``serial`` is
        pinned: key the graph by it (a new registration at the same address gets a new number)."""
        owner = _owner(array)
        if owner is None:
            return None
        key = id(owner)
        with self._lock:
            pin = self._pins.get(key)
            if pin is None or pin.ref() is not owner:
                self._note(key, owner)
                return None
            self._pins.move_to_end(key)
            if pin.state == _SEEN:
                self._make_room(pin.nbytes)
                pin.state = _PINNED if self._register(pin.address, pin.nbytes) else _REFUSED
                pin.serial = next(_SERIALS)
            if pin.state != _PINNED:
                return None
            address = pin.address if array is owner else array.__array_interface__["data"][0]
            return InPlace(array, address, pin.serial)

    def pinned_bytes(self) -> int:
        with self._lock:
            return sum(p.nbytes for p in self._pins.values() if p.state == _PINNED)

    def _note(self, key: int, owner: np.ndarray) -> None:
        stale = self._pins.pop(key, None)
        if stale is not None and stale.state == _PINNED:
            self._unregister(stale.address)
        ref = weakref.ref(owner, lambda _ref, key=key: self._gone(key))
        self._pins[key] = _Pin(ref, owner.__array_interface__["data"][0], owner.nbytes)
        if len(self._pins) > 8 * self.max_arrays:  # sightings never repeated: forget the oldest
            self._pins.pop(next(k for k, p in self._pins.items() if p.state != _PINNED), None)

    def _make_room(self, nbytes: int) -> None:
        pinned = [k for k, p in self._pins.items() if p.state == _PINNED]
        total = sum(self._pins[k].nbytes for k in pinned)
        while pinned and (len(pinned) >= self.max_arrays or total + nbytes > self.max_bytes):
            pin = self._pins[pinned.pop(0)]
            total -= pin.nbytes
            self._unregister(pin.address)
            pin.state = _REFUSED  # copied from now on: pins that take turns would cost more than copies

    def _gone(self, key: int) -> None:
        """An owner is being freed (a weak reference's callback: it must not raise, not even while the
        interpreter shuts down and CUDA with it)."""
        with self._lock:
            pin = self._pins.pop(key, None)
            if pin is None or pin.state != _PINNED:
                return
            try:
                self._unregister(pin.address)
            except Exception as exc:  # noqa: BLE001  (a freed array's callback has no caller to tell)
                log.debug("unpinning %#x as its array was freed failed: %s", pin.address, exc)
