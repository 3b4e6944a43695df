"""Postprocessing on the GPU: classification top-k, DETR-style box decoding, and the boxes of an engine
that ends in trtforge's NMS mapped back to each original image.

Each task has a fixed-size tensor stage (capturable in a CUDA graph: no syncs, no data-dependent
shapes) and a host stage that thresholds and wraps the few numbers left in plain dataclasses.

DETR-style decoding (as RF-DETR / Deformable-DETR post-process): per-class sigmoid over
``logits (B, Q, C)``, top-k over all (query, class) pairs, the chosen queries' boxes
``(cx, cy, w, h)`` in [0, 1] → ``(x1, y1, x2, y2)`` in pixels of the original image, then a score
threshold.

An engine built with ``postprocess=NMS(...)`` (``--nms``) returns the detections already, in the
EfficientNMS convention (``NMS_OUTPUTS``), boxes in the model input's pixels; ``nms_box_map`` and
``nms_to_pixels`` undo each image's resize (``resize_geometry``: letterbox or stretch) and clip the
boxes to the image.

Example:
    >>> top = detr_topk(logits, boxes, torch.tensor([[720, 1280]]), k=100)
    >>> dets = detections_from_topk(top, threshold=0.5)[0]
    >>> dets.xyxy.shape, dets.class_id[:3]
    ((17, 4), array([0, 0, 2]))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from trtforge.core.errors import InvalidArgument
from trtforge.core.postprocess import NMS_OUTPUTS
from trtforge.core.preprocessing import PreprocessConfig, resize_geometry


@dataclass(frozen=True)
class Classification:
    """Top-k classes of one image, best first."""

    class_id: np.ndarray  # (k,) int64
    score: np.ndarray  # (k,) float32 softmax probabilities
    names: Sequence[str] | None = None  # the label list, indexed by class id

    @property
    def label(self) -> tuple[str, ...]:
        return tuple(_label(self.names, int(i)) for i in self.class_id)


@dataclass(frozen=True)
class Detections:
    """The detections of one image, best first: boxes as (x1, y1, x2, y2) in the ORIGINAL image's pixels
    (clipped to it), their scores and class ids; ``label`` names the classes from the predictor's
    ``labels`` (``class_N`` without them).

    Example:
        >>> dets = predictor("street.jpg")          # an artifact built with --nms yolo
        >>> len(dets), dets.xyxy[0], dets.confidence[0], dets.label[0]
        (12, array([ 48.2, 103.9, 211.0, 377.5], dtype=float32), 0.91, 'person')
        >>> dets.to_numpy().shape                   # (n, 6): x1, y1, x2, y2, score, class id
        (12, 6)
    """

    xyxy: np.ndarray  # (n, 4) float32
    confidence: np.ndarray  # (n,) float32
    class_id: np.ndarray  # (n,) int64
    names: Sequence[str] | None = None  # the label list, indexed by class id

    @property
    def label(self) -> tuple[str, ...]:
        """Label of each box (computed on access: the hot path builds no strings)."""
        return tuple(_label(self.names, int(i)) for i in self.class_id)

    def __len__(self) -> int:
        return len(self.confidence)

    def to_numpy(self) -> np.ndarray:
        """One (n, 6) float32 array, a row per box: x1, y1, x2, y2, score, class id (ultralytics' ``boxes.data``)."""
        return np.concatenate([self.xyxy, self.confidence[:, None], self.class_id[:, None]], axis=1).astype(np.float32)

    def to_supervision(self):
        """As ``supervision.Detections`` (needs ``pip install supervision``)."""
        try:
            import supervision as sv
        except ImportError as exc:
            raise ImportError("to_supervision() needs the supervision package: pip install supervision") from exc
        return sv.Detections(
            xyxy=self.xyxy, confidence=self.confidence, class_id=self.class_id,
            data={"class_name": np.array(self.label)},
        )


def _label(labels: Sequence[str] | None, index: int) -> str:
    if labels is not None and 0 <= index < len(labels):
        return labels[index]
    return f"class_{index}"


# -- classification ---------------------------------------------------------------------------
def classification_topk(logits: torch.Tensor, k: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, C) logits → (scores, class ids), each (B, k): softmax then top-k. Capturable."""
    k = min(k, logits.shape[-1])
    return logits.float().softmax(-1).topk(k, dim=-1)


def classifications_from_arrays(
    scores: np.ndarray, ids: np.ndarray, labels: Sequence[str] | None = None
) -> list[Classification]:
    """Host stage: (B, k) scores and class ids → one ``Classification`` per image (views, no copies)."""
    scores, ids = scores.astype(np.float32, copy=False), ids.astype(np.int64, copy=False)
    return [Classification(ids[b], scores[b], labels) for b in range(len(ids))]


# -- DETR-style detection ---------------------------------------------------------------------
#: (cx, cy, w, h) @ this = (x1, y1, x2, y2): one matmul instead of eight element-wise kernels.
_CXCYWH_TO_XYXY = torch.tensor(
    [[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 1.0], [-0.5, 0.0, 0.5, 0.0], [0.0, -0.5, 0.0, 0.5]]
)


def detr_box_transform(image_sizes: torch.Tensor) -> torch.Tensor:
    """(B, 2) (height, width) of the original images → (B, 4, 4): normalised cxcywh → pixel xyxy.

    Computed once per image size; ``detr_topk`` applies it as one batched matmul.
    """
    sizes = image_sizes.to(torch.float32)
    scale = torch.stack((sizes[:, 1], sizes[:, 0], sizes[:, 1], sizes[:, 0]), dim=-1)  # w, h, w, h
    return _CXCYWH_TO_XYXY.to(sizes.device).unsqueeze(0) * scale.unsqueeze(1)


def detr_topk(
    logits: torch.Tensor, boxes: torch.Tensor, image_sizes: torch.Tensor | None = None, k: int = 100,
    *, box_transform: torch.Tensor | None = None, select_dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Top-k (query, class) pairs → (scores (B, k), class ids (B, k), xyxy pixel boxes (B, k, 4)).

    ``image_sizes`` is (B, 2) as (height, width) of the original images, or pass its
    ``detr_box_transform`` as ``box_transform``. ``select_dtype=torch.float16`` runs the top-k
    selection on FP16 keys: exact when the model computed the logits in FP16 (the FP16 routes),
    and half the radix passes (inside the H200 graph, the selection kernels of 100 of 300×80 took
    30 µs instead of 44 µs; docs/benchmarks.md). Capturable.
    """
    if logits.dim() != 3 or boxes.dim() != 3 or boxes.shape[-1] != 4 or boxes.shape[:2] != logits.shape[:2]:
        raise InvalidArgument(
            f"DETR decoding takes logits (B, Q, C) and boxes (B, Q, 4); got {tuple(logits.shape)} and "
            f"{tuple(boxes.shape)}"
        )
    if (image_sizes is None) == (box_transform is None):
        raise InvalidArgument("pass image_sizes (B, 2) or box_transform (B, 4, 4), one of them")
    if box_transform is None:
        box_transform = detr_box_transform(image_sizes)
    batch, queries, classes = logits.shape
    k = min(k, queries * classes)
    # The sigmoid is monotonic: pick the top-k logits, then squash only those k.
    flat = logits.float().flatten(1)
    if select_dtype is None or select_dtype == torch.float32:
        top_logits, index = flat.topk(k, dim=1)
    else:
        index = flat.to(select_dtype).topk(k, dim=1).indices
        top_logits = flat.gather(1, index)
    query = torch.div(index, classes, rounding_mode="floor")
    chosen = boxes.float().gather(1, query.unsqueeze(-1).expand(-1, -1, 4))
    return top_logits.sigmoid(), index % classes, torch.bmm(chosen, box_transform)


def detections_from_topk(
    topk: tuple[torch.Tensor, torch.Tensor, torch.Tensor], threshold: float = 0.5,
    labels: Sequence[str] | None = None,
) -> list[Detections]:
    """``detr_topk``'s tensors (any device) → results above ``threshold``."""
    scores, class_id, xyxy = (t.cpu().numpy() for t in topk)
    return detections_from_arrays(scores, class_id, xyxy, threshold=threshold, labels=labels)


def detections_from_arrays(
    scores: np.ndarray, class_id: np.ndarray, xyxy: np.ndarray, *, threshold: float = 0.5,
    labels: Sequence[str] | None = None,
) -> list[Detections]:
    """Host stage: keep scores above ``threshold`` (already sorted, best first)."""
    out = []
    for b in range(len(scores)):
        # Scores are sorted: the boxes above the threshold are a prefix (views, no copies).
        n = int(np.count_nonzero(scores[b] > threshold))
        out.append(Detections(xyxy[b, :n], scores[b, :n], class_id[b, :n], labels))
    return out


# -- detections from an engine that ends in trtforge's NMS -------------------------------------------
def nms_box_map(image_sizes: Sequence[tuple[int, int]], config: PreprocessConfig, device: Any = "cpu") -> torch.Tensor:
    """(B, 3, 4): per image, the offset, scale and bounds that map the model input's xyxy to the image's pixels.

    ``image_sizes`` are the original (height, width); the preprocessing record says how each was resized
    (``resize_geometry``). Computed once per batch shape (the predictor keeps it for its CUDA graph).
    """
    rows = []
    for height, width in image_sizes:
        where = resize_geometry(int(height), int(width), config.size, config.resize_mode)
        rows.append(((where.left, where.top) * 2, (where.scale_x, where.scale_y) * 2, (width, height) * 2))
    return torch.tensor(rows, dtype=torch.float32, device=device)


def nms_to_pixels(
    outputs: Mapping[str, torch.Tensor], box_map: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The NMS outputs → (counts (B,), xyxy in each image's pixels (B, K, 4), scores (B, K), class ids (B, K)).

    ``(box - offset) / scale``, clipped to [0, width] and [0, height]; rows past each count are padding.
    Capturable: no syncs, fixed shapes.
    """
    count, boxes, scores, classes = (outputs[name] for name in NMS_OUTPUTS)
    offset, scale, bounds = box_map[:, 0:1], box_map[:, 1:2], box_map[:, 2:3]
    xyxy = torch.minimum(((boxes.float() - offset) / scale).clamp(min=0.0), bounds)
    return count.reshape(-1).long(), xyxy, scores.float(), classes.long()


def detections_from_nms(
    count: np.ndarray, xyxy: np.ndarray, scores: np.ndarray, class_id: np.ndarray, *,
    threshold: float | None = None, labels: Sequence[str] | None = None,
) -> list[Detections]:
    """Host stage: each image's first ``count`` detections (the NMS sorted them, best first); with
    ``threshold``, only those scoring above it as well (views, no copies)."""
    out = []
    for b in range(len(count)):
        n = int(count[b])
        if threshold is not None:
            n = int(np.count_nonzero(scores[b, :n] > threshold))
        out.append(Detections(xyxy[b, :n], scores[b, :n], class_id[b, :n], labels))
    return out
