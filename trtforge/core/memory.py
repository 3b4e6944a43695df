"""Giving freed memory back to the system between large, short-lived buffers.

glibc's malloc raises its mmap threshold each time a large mmapped block is freed (up to 32 MiB on
64-bit), so the next tensors of that size come from the heap; a heap pinned by a few small live
objects above them cannot shrink, and a loop that allocates and frees tens of MiB per step (the
layer-wise comparison: both graphs' tensors, chunk after chunk, each with new ONNX Runtime sessions)
grows its resident size by the fragmented remainder at every step. ``trim_heap()`` (``malloc_trim(0)``)
returns the free pages of every arena. Elsewhere (musl, macOS, Windows) it does nothing: their
allocators have no such threshold, or trim on their own.

Example:
    >>> trim_heap()  # after a chunk's tensors are dropped
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools


@functools.cache
def _malloc_trim():
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        return getattr(ctypes.CDLL(name), "malloc_trim", None)
    except OSError:  # a libc that cannot be opened by name: nothing to trim with
        return None


def trim_heap() -> bool:
    """Return freed heap pages to the system (glibc ``malloc_trim(0)``); False where there is no such call."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim.argtypes = [ctypes.c_size_t]
    trim(0)
    return True
