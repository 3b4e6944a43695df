"""Results packed as bytes on the GPU, so one copy brings every result of a call to the host.

A CUDA graph that ends with ``host.copy_(layout.pack(results))`` has one device-to-host copy
instead of one per result; after the synchronize, ``layout.unpack`` splits the bytes back into
NumPy arrays with their own dtypes and shapes (views, no torch op on the host).

Example:
    >>> scores, ids = torch.rand(1, 5), torch.arange(5).view(1, 5)
    >>> layout = PackedLayout.of((scores, ids))
    >>> s, i = layout.unpack(layout.pack((scores, ids)).numpy())
    >>> i.dtype, s.shape
    (dtype('int64'), (1, 5))
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from trtforge.core.errors import InvalidArgument, WrongType

#: Result dtypes that can be packed, and their NumPy twins.
NUMPY_DTYPES = {torch.float32: np.float32, torch.float16: np.float16, torch.int64: np.int64,
                torch.int32: np.int32, torch.uint8: np.uint8, torch.bool: np.bool_}


@dataclass(frozen=True)
class PackedLayout:
    """Where each result sits in the packed bytes.

    ``perm`` lists the caller's result indices in packing order (largest items first, so each
    field starts aligned to its own item size); ``fields`` holds (dtype, shape, start, stop) per
    packed slot.
    """

    perm: tuple[int, ...]
    fields: tuple[tuple[np.dtype, tuple[int, ...], int, int], ...]
    nbytes: int

    @classmethod
    def of(cls, tensors: Sequence[torch.Tensor]) -> PackedLayout:
        """The layout for results shaped like ``tensors``."""
        for t in tensors:
            if t.dtype not in NUMPY_DTYPES:
                raise WrongType(f"cannot pack a {t.dtype} result; packable: {sorted(map(str, NUMPY_DTYPES))}")
        perm = tuple(sorted(range(len(tensors)), key=lambda i: -tensors[i].element_size()))
        fields, start = [], 0
        for i in perm:
            t = tensors[i]
            stop = start + t.numel() * t.element_size()
            fields.append((np.dtype(NUMPY_DTYPES[t.dtype]), tuple(t.shape), start, stop))
            start = stop
        return cls(perm, tuple(fields), start)

    def pack(self, tensors: Sequence[torch.Tensor]) -> torch.Tensor:
        """The tensors as one flat uint8 tensor on their device (one kernel; capturable)."""
        return torch.cat([tensors[i].contiguous().reshape(-1).view(torch.uint8) for i in self.perm])

    def unpack(self, packed: np.ndarray) -> tuple[np.ndarray, ...]:
        """Packed bytes → arrays in the caller's order (views of ``packed``)."""
        if packed.nbytes != self.nbytes:
            raise InvalidArgument(f"packed buffer has {packed.nbytes} bytes, the layout {self.nbytes}")
        out: list[np.ndarray] = [packed] * len(self.perm)
        for i, (dtype, shape, start, stop) in zip(self.perm, self.fields, strict=True):
            out[i] = packed[start:stop].view(dtype).reshape(shape)
        return tuple(out)
