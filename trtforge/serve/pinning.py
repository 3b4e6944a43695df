"""Host inputs straight from Triton's shared memory to the GPU: one DMA, no host copy.

Triton hands a Python-backend stub its host inputs in a shared-memory region (a file under
``/dev/shm``) that the stub maps. A copy from pageable memory to the GPU costs the host one more
pass over every byte (the CUDA driver first copies it into its own pinned staging buffer): for
float32 224² frames that is about 600 KB per image, on the same memory bus that Triton and the
stub already use to move the request. ``HostRegistry`` registers the stub's mapping of that region
with CUDA once (``cudaHostRegister``), after which a copy from it is a DMA the host does not touch.

Safe because the Python backend never unmaps a mapping of its region while the stub lives: growing
the region maps it again and keeps every older mapping (``SharedMemoryManager::old_shm_maps_`` in
python_backend's ``src/shm_manager.cc``). Only shared mappings of files under ``/dev/shm`` are
registered; anything else (a NumPy array on the heap) stays a pageable copy.

Example:
    >>> registry = HostRegistry()   # registers through trtforge.runtime.staging.cuda_register
    >>> registry.pinned(array)      # True once the mapping holding ``array`` is registered
    True
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Where POSIX shared memory lives on Linux: the only mappings registered.
SHM_PREFIX = "/dev/shm/"


@dataclass(frozen=True)
class Mapping:
    """One line of ``/proc/self/maps``: ``[start, end)``, shared or private, and the file."""

    start: int
    end: int
    shared: bool
    path: str


def parse_maps(text: str) -> list[Mapping]:
    """The mappings listed in a ``/proc/PID/maps`` text, in address order.

    Example:
        >>> parse_maps("7f00-7f10 rw-s 00000000 00:1a 42  /dev/shm/region")[0]
        Mapping(start=32512, end=32528, shared=True, path='/dev/shm/region')
    """
    mappings = []
    for line in text.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) < 5 or "-" not in fields[0]:
            continue
        low, high = fields[0].split("-", 1)
        mappings.append(Mapping(int(low, 16), int(high, 16), fields[1][3:4] == "s",
                                fields[5].strip() if len(fields) > 5 else ""))
    return sorted(mappings, key=lambda m: m.start)


def find_mapping(address: int, mappings: list[Mapping]) -> Mapping | None:
    """The mapping that holds ``address``, or None."""
    index = bisect.bisect_right([m.start for m in mappings], address) - 1
    return mappings[index] if index >= 0 and address < mappings[index].end else None


def _read_maps() -> str:
    return Path("/proc/self/maps").read_text()


class HostRegistry:
    """The mappings of this process that host inputs come from, found on first use: registered with
    CUDA when they are shared ``/dev/shm`` files, else remembered as not pinnable.

    ``pinned(array)`` is True when ``array``'s bytes lie in a registered mapping. A mapping is looked
    up in ``/proc/self/maps`` once; a mapping CUDA refused, or one that is not shared memory, is not
    tried again (a later mapping at the same addresses then stays a pageable copy: slower, never wrong).
    """

    def __init__(self, register: Callable[[int, int], bool] | None = None,
                 read_maps: Callable[[], str] = _read_maps) -> None:
        """``register(start, size)``: default ``trtforge.runtime.staging.cuda_register`` (imported
        when first needed: it loads torch)."""
        if register is None:
            from trtforge.runtime.staging import cuda_register as register
        self._register, self._read_maps = register, read_maps
        self._known: list[tuple[int, int, bool]] = []  # [start, end) and registered?, sorted by start

    @property
    def registered_bytes(self) -> int:
        return sum(end - start for start, end, ok in self._known if ok)

    def _lookup(self, start: int, size: int) -> bool | None:
        index = bisect.bisect_right(self._known, (start, float("inf"), True)) - 1
        if index < 0 or start >= self._known[index][1]:
            return None
        return self._known[index][2] and start + size <= self._known[index][1]

    def covers(self, array: Any) -> bool:
        """True when every byte of ``array`` lies in one registered mapping (looks nothing up)."""
        return bool(self._lookup(*_span(array)))

    def pinned(self, array: Any) -> bool:
        """True when a copy of ``array`` to the GPU can be one DMA (see the class docstring)."""
        start, size = _span(array)
        known = self._lookup(start, size)
        if known is not None:
            return known
        mapping = find_mapping(start, parse_maps(self._read_maps()))
        if mapping is None:
            return False
        ok = mapping.shared and mapping.path.startswith(SHM_PREFIX) and \
            self._register(mapping.start, mapping.end - mapping.start)
        bisect.insort(self._known, (mapping.start, mapping.end, bool(ok)))
        return bool(ok) and start + size <= mapping.end


def _span(array: Any) -> tuple[int, int]:
    """(first byte's address, byte count) of a contiguous NumPy array or torch tensor."""
    if hasattr(array, "data_ptr"):
        return array.data_ptr(), array.numel() * array.element_size()
    return array.__array_interface__["data"][0], array.nbytes
