"""Predictor for image models: images in, plain results out, pre- and post-processing on the GPU.

Flow of one call: decode once on the CPU (paths, PIL images) → uint8 to the GPU through a pinned
buffer → resize (or letterbox) + normalise → engine → top-k / DETR decoding / NMS boxes mapped back
to each image → a few numbers back to the host.

An engine that ends in trtforge's NMS (built with ``--nms``; its outputs are ``NMS_OUTPUTS``) is a
detector: ``task`` defaults to ``"detection"``, and each image's result is a ``Detections`` with its
boxes in that image's own pixels (each image's letterbox scale and border undone, then clipped).
Images of different sizes may share a call.

On a ``CapturableEngine`` (the TensorRT and PyTorch routes) and with ``cuda_graph=True`` (the
default when the engine replays graphs itself: route ``cuda_graph``, or ``tensorrt`` loaded with
``cuda_graph=True``), preprocessing, the model and the fixed-size decoding
are captured as ONE CUDA graph per (batch, height, width) of the incoming frames. The graph holds
the frames' DMA from a pinned buffer, and packs every result into one byte buffer that it copies
to pinned host memory once (``packing.PackedLayout``). A call with frames decoded into
``frame_buffer()`` goes straight to the replay: no decoding, no torch op on the host. Pageable
frames (numpy arrays) are first copied into the predictor's own pinned buffer, one
multi-threaded copy per frame; frames already on the GPU are copied into the graph's input.
Images of mixed sizes take the plain path.
``compile_preprocessing`` has ``torch.compile`` fuse uint8 → float, resize, normalise and the
cast into one kernel. By default (``None``) it is on when the predictor captures CUDA graphs and
Triton and a C compiler are there. With it, every H200 reading of the graph route at batch 1 from the frame
buffer was within 1.15× of the model alone (docs/benchmark-history.md). The first call per
frame size pays the compile: 5.1 s cold on the H200, 1.2–1.8 s with the capture once Inductor is
warm. Pass ``False`` to skip it; ``True`` forces it anywhere (on a CPU it needs a C++ compiler).

Example:
    >>> engine = trtforge.load("out/efficientnet_lite0_fp16.engine", route="cuda_graph")
    >>> predict = Predictor(engine, LITE0_PREPROCESSING, task="classification")
    >>> predict("cat.jpg").class_id[:1]
    array([281])
    >>> predict([frame1, frame2])        # a batch → a list of results
    >>> yolo = Predictor(trtforge.load("out/yolov8n_fp16.json"))   # built with --nms yolo, letterbox record
    >>> yolo(["street.jpg", "dog.png"])[0].xyxy[:1]                # pixels of street.jpg
    array([[ 48.2, 103.9, 211.0, 377.5]], dtype=float32)
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from trtforge.core.errors import InvalidArgument
from trtforge.core.postprocess import NMS_OUTPUTS
from trtforge.core.preprocessing import PreprocessConfig, decode_image
from trtforge.runtime.cuda_graph import GraphCache
from trtforge.runtime.placement import on_device
from trtforge.runtime.protocol import CapturableEngine, Engine, InputMovingEngine, ProfiledEngine
from trtforge.runtime.tensors import torch_dtype
from trtforge.vision.decode import (
    Classification,
    Detections,
    classification_topk,
    classifications_from_arrays,
    detections_from_arrays,
    detections_from_nms,
    detr_box_transform,
    detr_topk,
    nms_box_map,
    nms_to_pixels,
)
from trtforge.vision.packing import PackedLayout
from trtforge.vision.preprocess import Preprocessor, is_pageable

TASKS: tuple[str, ...] = ("classification", "detection")

#: Output names tried, in order, for the DETR-style heads (else the first two outputs).
DETR_LOGITS = ("logits", "pred_logits", "labels", "scores")
DETR_BOXES = ("boxes", "pred_boxes", "dets")


def _pick(names: Sequence[str], wanted: Sequence[str], fallback: int) -> str:
    for name in wanted:
        if name in names:
            return name
    return names[fallback]


def fuse_preprocessing_by_default(cuda_graph: bool, device: torch.device) -> bool:
    """Whether ``compile_preprocessing=None`` fuses: graphs on a CUDA device, Triton importable,
    and a C compiler for Triton's launcher (without one the first call would fail, not just slow).

    Example:
        >>> fuse_preprocessing_by_default(False, torch.device("cuda"))
        False
    """
    if not (cuda_graph and device.type == "cuda") or importlib.util.find_spec("triton") is None:
        return False
    compiler = os.environ.get("CC") or "cc"
    return any(shutil.which(c) for c in (compiler, "gcc", "clang"))


def max_batch(engine: Engine) -> int | None:
    """The most images one call of ``engine`` takes: its input's static batch, else the largest batch of its
    profiles; None when nothing bounds it. The predictor splits longer lists into calls of this size.

    Example:
        >>> max_batch(trtforge.load("out/yolov8n_fp32.json", route="onnxruntime"))   # built with --batch 1:4:4
        4
    """
    spec = engine.inputs[0]
    if spec.shape and int(spec.shape[0]) > 0:
        return int(spec.shape[0])
    profiles = (engine.profiles if isinstance(engine, ProfiledEngine) else ()) or ()
    maxima = [int(p[spec.name]["max"][0]) for p in profiles if spec.name in p]
    return max(maxima) if maxima else None


def _pinned_key(staging: torch.Tensor) -> tuple:
    """The graph key of a pinned frame buffer whose DMA the graph holds."""
    return (tuple(staging.shape), "pinned", staging.data_ptr())


class Predictor:
    """Runs an image ``Engine`` end to end; see the module docstring."""

    def __init__(
        self,
        engine: Engine,
        preprocessing: Mapping[str, Any] | PreprocessConfig | None = None,
        *,
        task: str | None = None,
        labels: Sequence[str] | None = None,
        top_k: int = 5,
        num_detections: int = 100,
        threshold: float | None = None,
        cuda_graph: bool | None = None,
        compile_preprocessing: bool | None = None,
    ) -> None:
        names = [s.name for s in engine.outputs]
        # An engine built with --nms returns detections: boxes to map back, nothing to decode.
        self._nms = all(name in names for name in NMS_OUTPUTS)
        task = task or ("detection" if self._nms else "classification")
        if task not in TASKS:
            raise InvalidArgument(f"unknown task {task!r}; choose one of {TASKS}")
        if self._nms and task != "detection":
            raise InvalidArgument(f"this engine ends in NMS (outputs {', '.join(NMS_OUTPUTS)}): it detects; "
                                  "pass task='detection' or leave task out")
        if preprocessing is None and engine.sidecar is not None:
            preprocessing = engine.sidecar.preprocessing
        if preprocessing is None:
            raise InvalidArgument("no preprocessing record: pass preprocessing= (the sidecar's 'preprocessing' dict)")
        config = preprocessing if isinstance(preprocessing, PreprocessConfig) else PreprocessConfig.from_dict(preprocessing)
        self.engine = engine
        self.task = task
        self.labels = labels
        self.top_k = top_k
        self.num_detections = num_detections
        # DETR decoding keeps scores above 0.5 by default; the NMS's own score threshold already applied.
        self.threshold = threshold if threshold is not None or self._nms else 0.5
        self.device = torch.device(engine.device)
        # The model input's dtype (FP16 I/O engines take half): the cast happens on the GPU.
        self.pre = Preprocessor(config, self.device, torch_dtype(engine.inputs[0].dtype),
                                move_inputs=isinstance(engine, InputMovingEngine) and bool(engine.move_inputs))
        self._logits = _pick(names, DETR_LOGITS, 0) if task == "detection" else names[0]
        self._boxes = _pick(names, DETR_BOXES, 1) if task == "detection" else None
        capturable = isinstance(engine, CapturableEngine)
        if cuda_graph is None:
            cuda_graph = capturable and self.device.type == "cuda" and engine.cuda_graph
        if cuda_graph and not (capturable and self.device.type == "cuda"):
            raise InvalidArgument(
                f"cuda_graph=True needs an engine that supports capture (the tensorrt or a PyTorch route) "
                f"on a CUDA device; this engine is {engine.route} on {self.device}. Pass cuda_graph=False"
            )
        self.cuda_graph = cuda_graph
        # (dtype, channels_last) the model computes in; the graph's preprocessing writes it directly.
        self._compute_format = engine.compute_format if capturable else (None, False)
        # torch.compile fuses uint8 → float, resize, normalise and the cast into one kernel; the
        # first call per frame size pays the compile.
        if compile_preprocessing is None:
            compile_preprocessing = fuse_preprocessing_by_default(cuda_graph, self.device)
        self.compile_preprocessing = compile_preprocessing
        self._transform = functools.partial(self.pre.transform, fused=compile_preprocessing)
        self._graphs = GraphCache(self.device) if cuda_graph else None
        self._max_batch = max_batch(engine)
        self._static: dict[tuple[int, ...], tuple[torch.Tensor, torch.Tensor]] = {}
        self._layouts: dict[tuple, tuple[PackedLayout, torch.Tensor]] = {}

    # -- stages ---------------------------------------------------------------------------
    def box_map(self, image_sizes: Sequence[tuple[int, int]]) -> torch.Tensor:
        """What maps the model's boxes to the pixels of images of these (height, width): for an NMS engine
        ``nms_box_map`` (each image's resize undone), else ``detr_box_transform``."""
        if self._nms:
            return nms_box_map(image_sizes, self.pre.config, self.device)
        return detr_box_transform(torch.tensor([tuple(s) for s in image_sizes], device=self.device))

    def _head(self, outputs: Mapping[str, torch.Tensor], boxes_to_pixels: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Fixed-size decoding; ``boxes_to_pixels`` is the frames' ``box_map``."""
        if self.task == "classification":
            return classification_topk(outputs[self._logits], self.top_k)
        if self._nms:
            return nms_to_pixels(outputs, boxes_to_pixels)
        # Logits a FP16 model computed are exact in FP16: select on them (half the radix passes).
        return detr_topk(outputs[self._logits], outputs[self._boxes], k=self.num_detections,
                         box_transform=boxes_to_pixels, select_dtype=self._compute_format[0])

    def _results(self, arrays: tuple[np.ndarray, ...]) -> list[Classification] | list[Detections]:
        if self.task == "classification":
            return classifications_from_arrays(*arrays, labels=self.labels)
        if self._nms:
            return detections_from_nms(*arrays, threshold=self.threshold, labels=self.labels)
        return detections_from_arrays(*arrays, threshold=self.threshold, labels=self.labels)

    def _finish(self, topk: tuple[torch.Tensor, ...]) -> list[Classification] | list[Detections]:
        """The plain path: every result to the host with one synchronize."""
        host = tuple(t.to("cpu", non_blocking=True) for t in topk)
        if self.device.type == "cuda":
            torch.cuda.current_stream(self.device).synchronize()
        return self._results(tuple(t.numpy() for t in host))

    def _replay(self, key: tuple, step: Callable[[], tuple[torch.Tensor, ...]] | None) -> tuple[np.ndarray, ...]:
        """Replay the graph for ``key`` (capturing ``step`` + packing + one copy to the host first)."""
        layouts = self._layouts

        def whole() -> torch.Tensor:
            out = step()
            if key not in layouts:  # the warm-up runs come before capture: allocate the host bytes here
                layout = PackedLayout.of(out)
                pinned = self.device.type == "cuda"
                layouts[key] = (layout, torch.empty(layout.nbytes, dtype=torch.uint8, pin_memory=pinned))
            layout, host = layouts[key]
            return host.copy_(layout.pack(out), non_blocking=True)

        host = self._graphs.replay(key, whole)
        if self.device.type == "cuda":
            torch.cuda.current_stream(self.device).synchronize()
        if len(layouts) > len(self._graphs):  # graphs the cache evicted: drop their host bytes too
            for stale in [k for k in layouts if k not in self._graphs]:
                del layouts[stale]
        return layouts[key][0].unpack(host.numpy().copy())  # the next replay overwrites the pinned bytes

    def _statics(self, shape: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
        entry = self._static.get(shape)
        if entry is None:  # the graph reads these two buffers: they live as long as it does
            entry = (torch.empty(shape, dtype=torch.uint8, device=self.device), self.box_map([shape[1:3]] * shape[0]))
            self._static[shape] = entry
        return entry

    def _graph_call(self, images: Sequence[Any]) -> tuple[np.ndarray, ...]:
        """One graph per (batch, height, width): upload into its input, then replay.

        Frames decoded into ``frame_buffer()`` take a graph that holds their DMA too: a call is
        one replay and one synchronize.
        """
        shape = (len(images), *tuple(images[0].shape))
        static, to_pixels = self._statics(shape)
        staging = self.pre.frame_buffer_of(images)
        if staging is None and all(is_pageable(im) for im in images):
            in_place = self.pre.pinned_in_place(images)  # the caller's arrays, seen before: pinned
            if in_place is not None:  # their DMAs in the graph, keyed by the registrations they read
                key = (shape, "in_place", tuple((p.address, p.serial) for p in in_place))
                return self._replay(key, lambda: self._step(static, to_pixels, [p.tensor for p in in_place]))
            staging = self.pre.stage(images)  # one memcpy per frame into our buffer, the DMA is in the graph
        if staging is not None:
            return self._replay(_pinned_key(staging), lambda: self._step(static, to_pixels, staging))
        self.pre.upload(images, out=static)  # frames on the GPU, pinned tensors, or a mix
        return self._replay((shape, "static"), lambda: self._step(static, to_pixels, None))

    def _frame_buffer_key(self, images: Sequence[Any]) -> tuple | None:
        """The graph key of frames that are exactly ``frame_buffer()``'s views, else None."""
        staging = self.pre.frame_buffer_of(images)
        return None if staging is None else _pinned_key(staging)

    def _step(self, static: torch.Tensor, to_pixels: torch.Tensor,
              staging: torch.Tensor | Sequence[torch.Tensor] | None) -> tuple[torch.Tensor, ...]:
        if isinstance(staging, torch.Tensor):
            static.copy_(staging, non_blocking=True)
        elif staging is not None:  # frames pinned in place: one DMA each
            for row, frame in zip(static, staging, strict=True):
                row.copy_(frame, non_blocking=True)
        dtype, channels_last = self._compute_format
        return self._head(self.engine.capturable_forward(self._transform(static, dtype, channels_last)), to_pixels)

    # -- calls ----------------------------------------------------------------------------
    def run_batch(self, images: Sequence[Any]) -> list[Classification] | list[Detections]:
        """A list of images → a list of results (one per image)."""
        if not images:
            return []
        step = self._max_batch or len(images)  # more images than the engine takes: calls of its largest batch
        with on_device(self.device):  # pinned buffers, graphs and streams: the engine's GPU's
            if len(images) <= step:
                return self._run_batch(images)
            return [r for i in range(0, len(images), step) for r in self._run_batch(images[i : i + step])]

    def _run_batch(self, images: Sequence[Any]) -> list[Classification] | list[Detections]:
        if self._graphs is not None:  # frames already in the pinned buffer, graph captured: just replay
            key = self._frame_buffer_key(images)
            if key in self._graphs:
                return self._results(self._replay(key, None))
        decoded = [decode_image(im) for im in images]
        same = all(tuple(im.shape) == tuple(decoded[0].shape) for im in decoded)
        if self._graphs is not None and same:
            return self._results(self._graph_call(decoded))
        sizes = [tuple(im.shape[:2]) for im in decoded]
        x = self._transform(self.pre.upload(decoded)) if same else self.pre(decoded)
        return self._finish(self._head(self.engine(x), self.box_map(sizes)))

    def __call__(self, images: Any) -> Any:
        """One image → one result; a list (or tuple) of images → a list of results."""
        if isinstance(images, (list, tuple)):
            return self.run_batch(images)
        return self.run_batch((images,))[0]

    def frame_buffer(self, batch: int, height: int, width: int):
        """Pinned host frames to decode into; passing ``buf[i]`` skips the host memcpy (see Preprocessor)."""
        return self.pre.frame_buffer(batch, height, width)

    def close(self) -> None:
        if self._graphs is not None:
            self._graphs.clear()
        self._static.clear()
        self._layouts.clear()

    def __enter__(self) -> Predictor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
