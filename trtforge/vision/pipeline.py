"""Batches of video frames through a ``Predictor``, pipelined: batch i+1's upload and preprocessing
run on a second CUDA stream while batch i's engine call runs, on two sets of buffers.

One batch on the plain predictor is upload → preprocess → engine → readback, all in series. For a
stream of batches (video), ``PipelinedPredictor`` keeps two *slots* (pinned host frames, device
frames, model input, captured engine graph, pinned results) and alternates between them:

    upload stream:   H2D + preprocess (slot 0) | H2D + preprocess (slot 1) | H2D + preprocess (slot 0) ...
    compute stream:                            | engine graph (slot 0)     | engine graph (slot 1)   ...

Events order each slot's uses (the upload of batch i+2 waits until batch i's graph has read its
model input; the host copy into a slot waits until its previous DMA finished), so results are
exactly the unpipelined predictor's. Frames may be pageable arrays (copied into the slot's pinned
buffer by ``copy_frames``), views of ``frame_buffer()`` (no host copy; the call
returns once their DMA is done, so the buffer can be refilled), or tensors on the GPU. On a CPU the
same slots run in series (what the tests check).

Example:
    >>> predictor = Predictor(trtforge.load("lite0.json", route="cuda_graph"), task="classification")
    >>> with PipelinedPredictor(predictor) as pipe:
    ...     for results in pipe.run(batches_of_8_frames):     # one list of 8 results per batch
    ...         print(results[0].class_id[0])
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from trtforge.core.errors import InvalidArgument
from trtforge.core.preprocessing import decode_image
from trtforge.runtime.cuda_graph import GraphCache
from trtforge.runtime.placement import on_device
from trtforge.runtime.staging import copy_frames
from trtforge.vision.packing import PackedLayout
from trtforge.vision.predictor import Predictor

__all__ = ["PipelinedPredictor"]


@dataclass
class _Slot:
    """One set of buffers a batch goes through; ``copied``/``done`` order their reuse."""

    shape: tuple[int, ...]
    staging: torch.Tensor  # pinned (B, H, W, 3) uint8
    frames: torch.Tensor  # (B, H, W, 3) uint8 on the device
    to_pixels: torch.Tensor
    model_input: torch.Tensor | None = None
    layout: PackedLayout | None = None
    results: torch.Tensor | None = None  # pinned packed bytes
    copied: Any = None  # event: the frames' DMA into ``frames`` is done
    done: Any = None  # event: the graph has run (read ``model_input``, wrote ``results``)
    events: list[Any] = field(default_factory=list)


class PipelinedPredictor:
    """A ``Predictor`` for a stream of same-size batches, two batches in flight; see the module docstring."""

    def __init__(self, predictor: Predictor, slots: int = 2) -> None:
        if slots < 1:
            raise InvalidArgument(f"slots={slots}; give 1 (no overlap) or 2 (double-buffered)")
        self.predictor, self.device = predictor, predictor.device
        self.cuda = self.device.type == "cuda"
        self._slots: list[_Slot | None] = [None] * slots
        self._next = 0
        self._graphs = GraphCache(self.device) if self.cuda and predictor.cuda_graph else None
        self._upload = torch.cuda.Stream(self.device) if self.cuda else None
        self._compute = torch.cuda.Stream(self.device) if self.cuda else None

    # -- calls ----------------------------------------------------------------------------
    def run(self, batches: Iterable[Sequence[Any]]) -> Iterator[list[Any]]:
        """Each batch of frames → its list of results, in order; batch i+1 is submitted before batch
        i's results are waited for."""
        pending: deque[int] = deque()
        with on_device(self.device):
            for batch in batches:
                pending.append(self._submit(batch))
                if len(pending) == len(self._slots):
                    yield self._collect(pending.popleft())
            while pending:
                yield self._collect(pending.popleft())

    def __call__(self, batch: Sequence[Any]) -> list[Any]:
        """One batch, not overlapped with anything (the same slots and graphs as ``run``)."""
        with on_device(self.device):
            return self._collect(self._submit(batch))

    # -- stages ---------------------------------------------------------------------------
    def _slot(self, index: int, images: Sequence[Any]) -> _Slot:
        shape = (len(images), *tuple(images[0].shape))
        slot = self._slots[index]
        if slot is None or slot.shape != shape:
            pinned = self.cuda
            slot = _Slot(shape, torch.empty(shape, dtype=torch.uint8, pin_memory=pinned),
                         torch.empty(shape, dtype=torch.uint8, device=self.device),
                         self.predictor.box_map([shape[1:3]] * shape[0]))
            if self.cuda:
                slot.copied, slot.done = torch.cuda.Event(), torch.cuda.Event()
            self._slots[index] = slot
        return slot

    def _stream(self, stream: Any) -> Any:
        return torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()

    def _submit(self, batch: Sequence[Any]) -> int:
        """Frames → the next slot; its upload and preprocessing queued on the upload stream, its graph
        on the compute stream after them. Returns the slot index."""
        images = [decode_image(im) for im in batch]
        if not images or any(tuple(im.shape) != tuple(images[0].shape) for im in images):
            raise InvalidArgument("PipelinedPredictor takes non-empty batches of frames of one size; resize the "
                                  "frames, or call the Predictor itself for mixed sizes")
        index, self._next = self._next, (self._next + 1) % len(self._slots)
        slot = self._slot(index, images)
        pre = self.predictor.pre
        source = pre.frame_buffer_of(images)
        on_gpu = all(isinstance(im, torch.Tensor) and im.device.type != "cpu" for im in images)
        if source is None and not on_gpu:
            if slot.copied is not None:
                slot.copied.synchronize()  # the slot's previous DMA has read its pinned frames
            copy_frames(slot.staging.numpy(), images)
            source = slot.staging
        caller = torch.cuda.current_stream(self.device) if self.cuda else None
        with self._stream(self._upload):
            if self.cuda:
                self._upload.wait_stream(caller)  # frames the caller produced on the GPU
                self._upload.wait_event(slot.done)  # the slot's previous graph has read its model input
            if on_gpu:
                for i, im in enumerate(images):
                    slot.frames[i].copy_(im, non_blocking=True)
            else:
                slot.frames.copy_(source, non_blocking=True)
            if self.cuda:
                slot.copied.record(self._upload)
            dtype, channels_last = self.predictor._compute_format
            x = self.predictor._transform(slot.frames, dtype, channels_last)
            if slot.model_input is None:
                slot.model_input = x  # kept for the slot's life: its graph reads it
            else:
                slot.model_input.copy_(x)
        if self.cuda and (on_gpu or source is not slot.staging):
            if on_gpu:
                caller.wait_event(slot.copied)  # the caller may overwrite its tensors after this
            else:
                slot.copied.synchronize()  # frame_buffer() may be refilled once this returns
        self._launch(index, slot)
        return index

    def _launch(self, index: int, slot: _Slot) -> None:
        """The engine, the fixed-size decoding and one copy of the packed results to pinned memory."""
        predictor = self.predictor

        def step() -> torch.Tensor:
            out = predictor._head(predictor.engine.capturable_forward(slot.model_input), slot.to_pixels)
            if slot.layout is None:
                slot.layout = PackedLayout.of(out)
                slot.results = torch.empty(slot.layout.nbytes, dtype=torch.uint8, pin_memory=self.cuda)
            return slot.results.copy_(slot.layout.pack(out), non_blocking=True)

        with self._stream(self._compute):
            if self.cuda:
                self._compute.wait_stream(self._upload)
            if self._graphs is not None:
                self._graphs.replay((index, slot.shape, slot.model_input.data_ptr()), step)
            else:
                step()
            if self.cuda:
                slot.done.record(self._compute)

    def _collect(self, index: int) -> list[Any]:
        slot = self._slots[index]
        if slot.done is not None:
            slot.done.synchronize()
        return self.predictor._results(slot.layout.unpack(slot.results.numpy().copy()))

    def close(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)  # nothing in flight reads the slots' buffers
        if self._graphs is not None:
            self._graphs.clear()
        self._slots = [None] * len(self._slots)

    def __enter__(self) -> PipelinedPredictor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
