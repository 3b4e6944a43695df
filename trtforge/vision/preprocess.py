"""Preprocessing on the device: pinned buffers, frame buffers, the upload, the fused transform.

The record and the transform itself live in ``trtforge.core.preprocessing`` (calibration runs the
same function on the CPU); this module moves uint8 pixels to the device through a reused pinned
buffer and runs that transform there, optionally compiled into one kernel.

Example:
    >>> pre = Preprocessor(PreprocessConfig.from_dict(LITE0_PREPROCESSING), torch.device("cuda"))
    >>> u8 = pre.upload([decode_image("cat.jpg")])       # (1, H, W, 3) uint8 on the GPU
    >>> pre.transform(u8).shape                          # (1, 3, 224, 224) float32
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from trtforge.core.errors import InvalidArgument
from trtforge.core.preprocessing import PreprocessConfig, transform, transform_tensor
from trtforge.runtime.placement import Placement, default_device, on_device, placement, refusal
from trtforge.runtime.staging import HostBuffer, InPlace, PinnedInPlace, copy_frames, host_copy

__all__ = ["Preprocessor", "fused_transform", "host_copy", "is_pageable"]

log = logging.getLogger(__name__)

def is_pageable(image: Any) -> bool:
    """A host image that is not in pinned memory (numpy, or a CPU tensor that is not pinned)."""
    if isinstance(image, np.ndarray):
        return True
    return isinstance(image, torch.Tensor) and image.device.type == "cpu" and not image.is_pinned()


def _address(image: Any) -> int:
    """Host address of a C-contiguous uint8 image's first pixel; -1 for anything else."""
    if type(image) is np.ndarray:
        ok = image.dtype == np.uint8 and image.flags.c_contiguous
        return image.__array_interface__["data"][0] if ok else -1
    if isinstance(image, torch.Tensor) and image.device.type == "cpu":
        return image.data_ptr() if image.dtype == torch.uint8 and image.is_contiguous() else -1
    return -1


@functools.cache
def fused_transform() -> Callable[..., torch.Tensor]:
    """``transform_tensor`` through ``torch.compile``, once per process.

    Predictors share it: a new predictor (a hot swap, a reload) with the same record and frame
    size reuses the compiled kernel instead of compiling again. Each new (record, frame size)
    compiles once; past Dynamo's ``recompile_limit`` (8) such keys in one process, further new
    keys run ``transform_tensor`` unfused (the same function) instead of failing.

    Example:
        >>> fused_transform() is fused_transform()
        True
    """
    from torch._dynamo.exc import FailOnRecompileLimitHit
    from torch._inductor import config as inductor_config

    compiled = torch.compile(transform_tensor, dynamic=False, fullgraph=True)

    def step(*args: Any) -> torch.Tensor:
        try:
            # One small kernel: compiled in this process. Inductor's default starts a pool of compile
            # workers, which take a core for seconds while they start (a pageable frame's copy then
            # stalled at 6 ms on the H200); a compile per frame size gains nothing from them.
            with inductor_config.patch(compile_threads=1):
                return compiled(*args)
        except FailOnRecompileLimitHit:
            _warn_unfused()
            return transform_tensor(*args)

    return step


@functools.cache
def _warn_unfused() -> None:
    log.warning("fused preprocessing: torch.compile's recompile limit is reached (one compile per record and "
                "frame size); new frame sizes run the unfused transform. Raise "
                "torch._dynamo.config.recompile_limit to fuse more sizes")


class Preprocessor:
    """Uploads uint8 images and turns them into the model's input tensor on ``device``."""

    def __init__(self, config: PreprocessConfig, device: torch.device, dtype: torch.dtype = torch.float32, *,
                 move_inputs: bool = False) -> None:
        self.config = config
        self.device = default_device(device)  # cuda → cuda:N: every buffer below is that GPU's
        self.dtype = dtype
        # Frames on another GPU: refused (the default), or copied across when the caller opted in.
        self.move_inputs = move_inputs
        # x * scale, minus mean, over std  ==  x * a + b, one fused multiply-add on the GPU.
        self._coefficients = config.coefficients(self.device)
        # The pinned buffer for frames of one shape, and the host address of each of its frames.
        self._staging: dict[tuple[int, ...], tuple[torch.Tensor, tuple[int, ...]]] = {}
        # Our own pinned bytes for pageable frames (grow-only: batch sizes vary, and pinning costs more
        # than the copy); the caller's frame_buffer() is never written.
        self._pageable = HostBuffer(self.device)
        # The caller's own arrays, pinned where they are when they come back (a decoder's buffers).
        self._in_place = PinnedInPlace() if self.device.type == "cuda" else None

    def _pinned(self, shape: tuple[int, ...]) -> torch.Tensor:
        entry = self._staging.get(shape)
        if entry is None:
            with on_device(self.device):
                buffer = torch.empty(shape, dtype=torch.uint8, pin_memory=self.device.type == "cuda")
            per_image = buffer[0].numel() if shape[0] else 0
            entry = (buffer, tuple(buffer.data_ptr() + i * per_image for i in range(shape[0])))
            self._staging = {shape: entry}  # keep one: frames of one stream share a size
        return entry[0]

    def staging(self, shape: tuple[int, ...]) -> torch.Tensor:
        """The pinned (B, H, W, 3) uint8 buffer behind ``frame_buffer()`` for frames of ``shape``."""
        return self._pinned(shape)

    def staged(self, shape: tuple[int, ...]) -> torch.Tensor:
        """Our pinned uint8 buffer viewed as ``shape``: one allocation that only grows, so a batch of
        another size reuses it (its address changes only when it grows)."""
        return self._pageable.view(shape)

    def is_staged(self, frames: Any) -> bool:
        """Whether ``frames`` (a (B, H, W, 3) array or tensor) already is ``staged(frames.shape)``."""
        return _address(frames) != -1 and self._pageable.holds(frames)

    def stage(self, images: Sequence[np.ndarray | torch.Tensor] | np.ndarray) -> torch.Tensor:
        """Same-size host images (or one (B, H, W, 3) array) → our pinned (B, H, W, 3) buffer.

        ``copy_frames`` copies (large frames of a batch in bands on a few threads, anything else in
        one ``np.copyto`` per frame or batch); frames that already are the buffer (``staged``) are not copied. The
        buffer is reused: synchronize before the next call overwrites it (the predictor does).
        """
        shape = (len(images), *tuple(images[0].shape))
        buffer = self.staged(shape)
        if not (isinstance(images, (np.ndarray, torch.Tensor)) and images.ndim == 4 and self.is_staged(images)):
            copy_frames(buffer.numpy(), images)
        return buffer

    def pinned_in_place(self, images: Sequence[Any]) -> list[InPlace] | None:
        """The caller's own arrays as tensors over their pinned bytes when every one is pinned in
        place (``PinnedInPlace``: from an array's second upload on), else None. Each upload from
        them is one DMA."""
        if self._in_place is None:
            return None
        pins = [self._in_place.pin(im) for im in images]
        return None if any(p is None for p in pins) else pins

    def frame_buffer_of(self, images: Sequence[Any]) -> torch.Tensor | None:
        """The pinned buffer when image ``i`` is exactly ``frame_buffer()[i]`` for every i, else None."""
        shape = (len(images), *getattr(images[0], "shape", ()))
        entry = self._staging.get(shape)
        if entry is None or not all(_address(im) == a for im, a in zip(images, entry[1], strict=True)):
            return None
        return entry[0]

    def frame_buffer(self, batch: int, height: int, width: int) -> np.ndarray:
        """A pinned (batch, height, width, 3) uint8 array to decode frames into.

        Frames passed to the predictor as views of it (``buf[i]``) skip the host memcpy: only the
        DMA to the GPU remains. Valid until a call with frames of another size replaces it.

        Example:
            >>> frames = predictor.frame_buffer(1, 720, 1280)
            >>> frames[0][...] = decoder.read()      # or cv2.imread(...) into it
            >>> predictor(frames[0])
        """
        return self._pinned((batch, height, width, 3)).numpy()

    def upload(self, images: Sequence[np.ndarray | torch.Tensor], out: torch.Tensor | None = None) -> torch.Tensor:
        """Same-size HWC uint8 images → one (B, H, W, 3) uint8 tensor on the device (``out`` if given).

        Pageable host images go through our reused pinned buffer (``stage``), then one
        non-blocking copy each; frames in ``frame_buffer()`` and pinned tensors skip the memcpy.
        The caller must synchronize before the next upload reuses that buffer (the predictor
        does: it reads its results back on the host).
        """
        shape = (len(images), *tuple(images[0].shape))
        if any(tuple(im.shape) != shape[1:] for im in images):
            raise InvalidArgument("upload() takes images of one size; pass images of another size in another call")
        for i, im in enumerate(images):
            if isinstance(im, torch.Tensor) and placement(im.device, self.device, self.move_inputs) is Placement.REFUSE:
                raise refusal(f"image {i}", im.device, self.device)
        if out is None:
            out = torch.empty(shape, dtype=torch.uint8, device=self.device)
        if self.device.type != "cuda":
            for i, im in enumerate(images):
                out[i].copy_(torch.as_tensor(im))
            return out
        frames = self._staging.get(shape)
        addresses = frames[1] if frames is not None else ()
        pageable = []
        for i, im in enumerate(images):
            if i < len(addresses) and _address(im) == addresses[i]:  # decoded into frame_buffer(): no memcpy
                out[i].copy_(frames[0][i], non_blocking=True)
            elif isinstance(im, torch.Tensor) and im.device.type != "cpu":  # ours, or another GPU's when moved
                out[i].copy_(im)
            elif isinstance(im, torch.Tensor) and im.is_pinned() and im.is_contiguous():
                out[i].copy_(im, non_blocking=True)
            elif (in_place := self.pinned_in_place([im])) is not None:  # the caller's pages, pinned
                out[i].copy_(in_place[0].tensor, non_blocking=True)
            else:
                pageable.append(i)
        if pageable:
            staged = self.stage([images[i] for i in pageable])
            for j, i in enumerate(pageable):
                out[i].copy_(staged[j], non_blocking=True)
        return out

    def transform(self, u8: torch.Tensor, dtype: torch.dtype | None = None, channels_last: bool = False, *,
                  fused: bool = False) -> torch.Tensor:
        """(B, H, W, 3) uint8 → the model input: resized, normalised, NCHW (capturable: no syncs).

        ``dtype`` and ``channels_last`` let a caller that feeds the model directly (the predictor's
        graph) get the model's own compute format in the same final copy. ``fused=True`` runs
        ``fused_transform()``: the same steps as one Inductor kernel.
        """
        step = fused_transform() if fused else transform_tensor
        return transform(u8, self.config, dtype or self.dtype, channels_last, coefficients=self._coefficients,
                         step=step)

    def __call__(self, images: Sequence[np.ndarray | torch.Tensor]) -> torch.Tensor:
        """Decoded images (any sizes) → one model-input batch on the device."""
        if all(tuple(im.shape) == tuple(images[0].shape) for im in images):
            return self.transform(self.upload(images))
        return torch.cat([self.transform(self.upload([im])) for im in images])
