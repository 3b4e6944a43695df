"""The reference the fixed-shape NMS must equal: greedy class-aware NMS in numpy, torchvision's ``batched_nms``
rule after ultralytics' selection (best class per box, score > threshold, the ``candidates`` best, descending
score, a box suppressed by a kept box of its class with IoU > threshold, the first ``max_detections`` kept).

The arithmetic is FP32 in torchvision's ``box_iou`` order, so equal means bit-equal boxes and scores.

Example:
    >>> boxes, scores, classes = greedy_nms(xyxy, class_scores, NMS("yolo"))   # one image
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from trtforge.core.postprocess import NMS

#: Where ``make setup`` (``make yolo-models``) writes the YOLO ONNX files and their reference outputs.
YOLO_MODELS = Path(__file__).resolve().parents[2] / ".venv-yolo" / "models"
YOLO_NAMES = ("yolov8n", "yolo11n", "yolov5nu")


def yolo_file(name: str) -> Path:
    path = YOLO_MODELS / name
    if not path.exists():
        pytest.fail(f"{path} is missing: `make setup` (or `make yolo-models`) exports the YOLO files")
    return path


def xywh_to_xyxy(xywh: np.ndarray) -> np.ndarray:
    """(..., 4) cx, cy, w, h → x1, y1, x2, y2, as ultralytics' ``xywh2xyxy`` (FP32)."""
    centre, half = xywh[..., :2], xywh[..., 2:] * np.float32(0.5)
    return np.concatenate([centre - half, centre + half], -1)


def greedy_nms(boxes: np.ndarray, scores: np.ndarray, nms: NMS) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One image: ``boxes (A, 4)`` x1, y1, x2, y2 and ``scores (A, C)`` → kept boxes, scores, classes."""
    best, classes = scores.max(1), scores.argmax(1)
    order = np.argsort(-best, kind="stable")
    order = order[best[order] > nms.score_threshold][: nms.candidates]
    boxes, best, classes = boxes[order], best[order], classes[order]
    x1, y1, x2, y2 = boxes.T
    area = (x2 - x1) * (y2 - y1)
    kept: list[int] = []
    for i in range(len(order)):
        rivals = np.array([j for j in kept if nms.class_agnostic or classes[j] == classes[i]], np.int64)
        if rivals.size:
            w = np.maximum(np.minimum(x2[i], x2[rivals]) - np.maximum(x1[i], x1[rivals]), np.float32(0))
            h = np.maximum(np.minimum(y2[i], y2[rivals]) - np.maximum(y1[i], y1[rivals]), np.float32(0))
            inter = w * h
            if (inter / (area[i] + area[rivals] - inter) > np.float32(nms.iou_threshold)).any():
                continue
        kept.append(i)
    kept = kept[: nms.max_detections]
    return boxes[kept], best[kept], classes[kept].astype(np.int32)


def assert_same_detections(outputs: list[np.ndarray], boxes: np.ndarray, scores: np.ndarray, nms: NMS) -> list[int]:
    """The NMS graph's four outputs for a batch equal ``greedy_nms`` image by image; returns the counts."""
    count, out_boxes, out_scores, out_classes = outputs
    counts = []
    for i in range(len(boxes)):
        ref_boxes, ref_scores, ref_classes = greedy_nms(boxes[i], scores[i], nms)
        n = int(count[i, 0])
        assert n == len(ref_scores), f"image {i}: {n} detections, greedy NMS keeps {len(ref_scores)}"
        np.testing.assert_array_equal(out_boxes[i, :n], ref_boxes, err_msg=f"image {i} boxes")
        np.testing.assert_array_equal(out_scores[i, :n], ref_scores, err_msg=f"image {i} scores")
        np.testing.assert_array_equal(out_classes[i, :n], ref_classes, err_msg=f"image {i} classes")
        assert not out_scores[i, n:].any() and not out_boxes[i, n:].any(), f"image {i}: padding is not zero"
        counts.append(n)
    return counts
