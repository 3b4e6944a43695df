"""Predictor for image models: images in, plain results out, pre- and post-processing on the GPU.

Flow of one call: decode once on the CPU (paths, PIL images) → uint8 to the GPU through a pinned
buffer → resize + normalise → engine → top-k / DETR decoding → a few numbers back to the host.

On an engine that offers ``capturable_forward`` (the PyTorch routes) and with ``cuda_graph=True``
(the default on the ``cuda_graph`` route), preprocessing, the model and the fixed-size decoding
are captured as ONE CUDA graph per (batch, height, width) of the incoming frames, and each call
is: copy uint8 in, replay, read back. Images of mixed sizes take the plain path.

Example:
    >>> engine = trtforge.load("out/efficientnet_lite0_fp16.engine", route="cuda_graph")
    >>> predict = Predictor(engine, LITE0_PREPROCESSING, task="classification")
    >>> predict("cat.jpg").class_id[:1]
    array([281])
    >>> predict([frame1, frame2])        # a batch → a list of results
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from trtforge.runtime.cuda_graph import GraphCache
from trtforge.runtime.protocol import Engine
from trtforge.runtime.tensors import torch_dtype
from trtforge.vision.decode import (
    Classification,
    Detections,
    classification_topk,
    classifications_from_topk,
    detections_from_topk,
    detr_topk,
)
from trtforge.vision.preprocess import PreprocessConfig, Preprocessor, decode_image

TASKS: tuple[str, ...] = ("classification", "detection")

#: Output names tried, in order, for the DETR-style heads (else the first two outputs).
DETR_LOGITS = ("logits", "pred_logits", "labels", "scores")
DETR_BOXES = ("boxes", "pred_boxes", "dets")


def _pick(names: Sequence[str], wanted: Sequence[str], fallback: int) -> str:
    for name in wanted:
        if name in names:
            return name
    return names[fallback]


class Predictor:
    """Runs an image ``Engine`` end to end; see the module docstring."""

    def __init__(
        self,
        engine: Engine,
        preprocessing: Mapping[str, Any] | PreprocessConfig | None = None,
        *,
        task: str = "classification",
        labels: Sequence[str] | None = None,
        top_k: int = 5,
        num_detections: int = 100,
        threshold: float = 0.5,
        cuda_graph: bool | None = None,
    ) -> None:
        if task not in TASKS:
            raise ValueError(f"unknown task {task!r}; choose one of {TASKS}")
        if preprocessing is None:
            preprocessing = getattr(getattr(engine, "sidecar", None), "preprocessing", None)
        if preprocessing is None:
            raise ValueError("no preprocessing record: pass preprocessing= (the sidecar's 'preprocessing' dict)")
        config = preprocessing if isinstance(preprocessing, PreprocessConfig) else PreprocessConfig.from_dict(preprocessing)
        self.engine = engine
        self.task = task
        self.labels = labels
        self.top_k = top_k
        self.num_detections = num_detections
        self.threshold = threshold
        self.device = torch.device(engine.device)
        # The model input's dtype (FP16 I/O engines take half): the cast happens on the GPU.
        self.pre = Preprocessor(config, self.device, torch_dtype(engine.inputs[0].dtype))
        names = [s.name for s in engine.outputs]
        self._logits = _pick(names, DETR_LOGITS, 0) if task == "detection" else names[0]
        self._boxes = _pick(names, DETR_BOXES, 1) if task == "detection" else None
        capturable = hasattr(engine, "capturable_forward") and self.device.type == "cuda"
        if cuda_graph is None:
            cuda_graph = capturable and engine.route == "cuda_graph"
        if cuda_graph and not capturable:
            raise ValueError(
                f"cuda_graph=True needs a PyTorch route on a CUDA device; this engine is {engine.route} "
                f"on {self.device}. Use the tensorrt route with cuda_graph=True for TensorRT engines"
            )
        self.cuda_graph = cuda_graph
        self._graphs = GraphCache(self.device) if cuda_graph else None
        self._static: dict[tuple[int, ...], tuple[torch.Tensor, torch.Tensor]] = {}

    # -- stages ---------------------------------------------------------------------------
    def _head(self, outputs: Mapping[str, torch.Tensor], sizes: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if self.task == "classification":
            return classification_topk(outputs[self._logits], self.top_k)
        return detr_topk(outputs[self._logits], outputs[self._boxes], sizes, self.num_detections)

    def _finish(self, topk: tuple[torch.Tensor, ...]) -> list[Classification] | list[Detections]:
        # All results to the host with one synchronize (non-blocking copies land in pinned memory).
        # Results the graph already copied into its pinned host buffers are cloned after the
        # synchronize: the next replay overwrites those buffers.
        on_host = tuple(t.device.type == "cpu" for t in topk)
        topk = tuple(t if host else t.to("cpu", non_blocking=True) for t, host in zip(topk, on_host, strict=True))
        if self.device.type == "cuda":
            torch.cuda.current_stream(self.device).synchronize()
        topk = tuple(t.clone() if host else t for t, host in zip(topk, on_host, strict=True))
        if self.task == "classification":
            return classifications_from_topk(topk, self.labels)
        return detections_from_topk(topk, self.threshold, self.labels)

    def _graph_step(self, images: list) -> tuple[torch.Tensor, ...]:
        shape = (len(images), *tuple(images[0].shape))
        entry = self._static.get(shape)
        if entry is None:  # the graph reads these two buffers: they live as long as it does
            entry = (torch.empty(shape, dtype=torch.uint8, device=self.device),
                     torch.tensor([shape[1:3]] * shape[0], device=self.device))
            self._static[shape] = entry
        static, sizes = entry
        if self.device.type == "cuda" and self.pre.in_frame_buffer(images):
            return self._graphs.replay((shape, "frame_buffer"), self._frame_buffer_step(shape, static, sizes))
        self.pre.upload(images, out=static)

        def step() -> tuple[torch.Tensor, ...]:
            x = self.pre.transform(static)
            return self._head(self.engine.capturable_forward(x), sizes)

        return self._graphs.replay(shape, step)

    def _frame_buffer_step(self, shape: tuple[int, ...], static: torch.Tensor, sizes: torch.Tensor):
        """The whole call as one graph for frames decoded into ``frame_buffer()``.

        The DMA of the pinned frames in, preprocessing, the model, decoding and the copies of the
        results into pinned host buffers are all captured, so a call is one replay and one sync.
        """
        staging = self.pre.staging(shape)
        host: list[torch.Tensor] = []

        def step() -> tuple[torch.Tensor, ...]:
            static.copy_(staging, non_blocking=True)
            out = self._head(self.engine.capturable_forward(self.pre.transform(static)), sizes)
            if not host:  # allocated during the warm-up runs, before capture starts
                host.extend(torch.empty(t.shape, dtype=t.dtype, pin_memory=True) for t in out)
            return tuple(h.copy_(t, non_blocking=True) for h, t in zip(host, out, strict=True))

        return step

    def run_batch(self, images: Sequence[Any]) -> list[Classification] | list[Detections]:
        """A list of images → a list of results (one per image)."""
        decoded = [decode_image(im) for im in images]
        if not decoded:
            return []
        same = all(tuple(im.shape) == tuple(decoded[0].shape) for im in decoded)
        if self._graphs is not None and same:
            return self._finish(self._graph_step(decoded))
        sizes = torch.tensor([tuple(im.shape[:2]) for im in decoded], device=self.device)
        x = self.pre(decoded)
        return self._finish(self._head(self.engine(x), sizes))

    def __call__(self, images: Any) -> Any:
        """One image → one result; a list (or tuple) of images → a list of results."""
        if isinstance(images, (list, tuple)):
            return self.run_batch(images)
        return self.run_batch([images])[0]

    def frame_buffer(self, batch: int, height: int, width: int):
        """Pinned host frames to decode into; passing ``buf[i]`` skips the host memcpy (see Preprocessor)."""
        return self.pre.frame_buffer(batch, height, width)

    def close(self) -> None:
        if self._graphs is not None:
            self._graphs.clear()
        self._static.clear()

    def __enter__(self) -> Predictor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
