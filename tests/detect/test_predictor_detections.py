"""Issue 37, item 4: the predictor returns detections. A YOLOv8n artifact built with ``--nms yolo`` and a letterbox
preprocessing record, run by the predictor on the ONNX Runtime route, gives for photos of different sizes (one
mixed batch) each photo's detections in its own pixels, equal to ONNX Runtime on a letterbox and a box mapping
written here in NumPy after ultralytics' ``LetterBox`` and ``scale_boxes``; the mixed batch equals the photos one
at a time; and the letterbox and its inverse agree with hand-computed cases.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from cli_in_process import run
from detect_reference import YOLO_MODELS
from skimage import data

import trtforge
from trtforge.core.errors import InvalidArgument
from trtforge.core.ort_session import session as ort_session
from trtforge.core.postprocess import NMS_OUTPUTS
from trtforge.core.preprocessing import PreprocessConfig, resize_geometry, transform
from trtforge.vision import Detections, Predictor
from trtforge.vision.decode import detections_from_nms, nms_box_map, nms_to_pixels
from trtforge.vision.predictor import max_batch

SIZE = 320


def photos() -> list[np.ndarray]:
    """Three photos of different sizes and aspects: landscape, portrait, and wide with an odd border."""
    return [data.chelsea(), np.ascontiguousarray(data.coffee()[:, 150:450]), np.ascontiguousarray(data.rocket()[:301])]


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    """yolov8n.onnx built with --nms yolo, batch 1..4, the letterbox record in its sidecar: its sidecar path."""
    if not (YOLO_MODELS / "yolov8n.onnx").is_file():
        pytest.skip(f"{YOLO_MODELS} has no yolov8n.onnx: `make setup` (or `make yolo-models`) exports it")
    out = tmp_path_factory.mktemp("yolo_predictor")
    record = out / "letterbox.json"
    record.write_text(json.dumps({"resize": [SIZE, SIZE], "resize_mode": "letterbox"}))
    done = run(["build", str(YOLO_MODELS / "yolov8n.onnx"), "--nms", "yolo", "--precision", "fp32", "--opt-level", "0",
                "--dynamic-batch", "--batch", "1:4:4", "--preprocessing", str(record), "-o", str(out), "-q"])
    assert done.returncode == 0, done.stderr
    shown = run(["inspect", str(out / "yolov8n_fp32.json")])
    assert shown.returncode == 0 and "letterbox (pad 114) [320, 320]" in shown.stdout, shown.stdout
    return out / "yolov8n_fp32.json"


def bilinear(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """HWC resize with half-pixel centres and no antialias, in FP32 as torch computes it (source coordinates
    clamped at 0): in FP64 the pixels moved by 2e-3 of 255, and this random-weight YOLO's boxes by 1.6e-3 px."""
    def taps(n_out: int, n_in: int):
        f32 = np.float32
        src = np.maximum((np.arange(n_out, dtype=f32) + f32(0.5)) * (f32(n_in) / f32(n_out)) - f32(0.5), f32(0))
        low = np.minimum(src.astype(np.int64), n_in - 1)
        return low, np.minimum(low + 1, n_in - 1), (src - low.astype(f32))[:, None]

    image = image.astype(np.float32)
    y0, y1, fy = taps(height, image.shape[0])
    x0, x1, fx = taps(width, image.shape[1])
    rows = image[y0] * (1 - fy[..., None]) + image[y1] * fy[..., None]
    return rows[:, x0] * (1 - fx) + rows[:, x1] * fx


def reference(session, photo: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ultralytics' letterbox (scale r = min(S/h, S/w), centred, grey 114) and scale_boxes + clip_boxes, in NumPy."""
    h, w = photo.shape[:2]
    r = min(SIZE / h, SIZE / w)
    nh, nw = int(round(h * r)), int(round(w * r))
    top, left = int(round((SIZE - nh) / 2 - 0.1)), int(round((SIZE - nw) / 2 - 0.1))
    canvas = np.full((SIZE, SIZE, 3), 114.0, np.float32)
    canvas[top : top + nh, left : left + nw] = bilinear(photo, nh, nw)
    x = (canvas * np.float32(1 / 255)).transpose(2, 0, 1)[None]  # the record's scale: x * (1 / 255)
    count, boxes, scores, classes = session.run(list(NMS_OUTPUTS), {"images": x})
    n = int(count[0, 0])
    boxes = (boxes[0, :n] - np.array([left, top, left, top], np.float32)) / np.float32(r)
    boxes = np.clip(boxes, 0, np.array([w, h, w, h], np.float32))
    return boxes, scores[0, :n], classes[0, :n]


@pytest.mark.slow  # a yolov8n build (~2 s) and 14 runs of YOLOv8n at 320²
def test_predictor_detections_equal_numpy_letterbox_reference(artifact):
    engine = trtforge.load(artifact, route="onnxruntime")
    predict = Predictor(engine, labels=[f"thing{i}" for i in range(80)])
    assert predict.task == "detection" and predict.pre.config.resize_mode == "letterbox"
    with pytest.raises(InvalidArgument, match="this engine ends in NMS .* pass task='detection' or leave task out"):
        Predictor(engine, task="classification")
    assert len({p.shape for p in photos()}) == 3
    batch = predict(photos())  # one call, three sizes: each letterboxed, each mapped back with its own scale and pad
    session = ort_session(artifact.with_suffix(".onnx"))  # the graph the engine was built from
    for photo, dets in zip(photos(), batch, strict=True):
        boxes, scores, classes = reference(session, photo)
        assert isinstance(dets, Detections) and len(dets) == len(scores) > 0
        np.testing.assert_allclose(dets.xyxy, boxes, atol=1e-3, rtol=0)
        np.testing.assert_allclose(dets.confidence, scores, atol=1e-5, rtol=0)
        np.testing.assert_array_equal(dets.class_id, classes)
        assert dets.label[0] == f"thing{classes[0]}" and dets.xyxy.max() <= max(photo.shape[:2])
        np.testing.assert_allclose(dets.to_numpy(), np.column_stack([boxes, scores, classes]), atol=1e-3, rtol=0)
    # The mixed batch equals each photo on its own; five photos, past the engine's batch of 4, go as 4 + 1.
    assert max_batch(engine) == 4
    alone, five = [predict(photo) for photo in photos()], predict(photos() + photos()[:2])
    for dets, again in zip(batch + batch + batch[:2], alone + five, strict=True):
        assert len(again) == len(dets)
        np.testing.assert_allclose(again.xyxy, dets.xyxy, atol=1e-3, rtol=0)
        np.testing.assert_array_equal(again.class_id, dets.class_id)


def test_letterbox_and_its_inverse_by_hand():
    """A 3 x 5 image into 8 x 8: r = min(8/3, 8/5) = 1.6, 5 x 8 pixels (round(4.8)), top border (8 - 5) // 2 = 1,
    bottom 2; the border is 114 grey before the normalisation; a box maps back through (x - pad) / 1.6."""
    config = PreprocessConfig((8, 8), mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25), resize_mode="letterbox")
    assert resize_geometry(3, 5, (8, 8), "letterbox") == (where := resize_geometry(3, 5, config.size, config.resize_mode))
    assert (where.scale_x, where.top, where.left, where.height, where.width) == (1.6, 1, 0, 5, 8)
    x = transform(torch.full((1, 3, 5, 3), 200, dtype=torch.uint8), config)[0, 0]
    border, inside = (114 / 255 - 0.5) / 0.25, (200 / 255 - 0.5) / 0.25
    assert torch.allclose(x[[0, 6, 7]], torch.full((3, 8), border)) and torch.allclose(x[1:6], torch.full((5, 8), inside))
    assert resize_geometry(3, 5, (8, 8), "stretch") == type(where)(8 / 3, 1.6, 0, 0, 8, 8)
    outputs = {"num_detections": torch.tensor([[2]], dtype=torch.int32),
               "detection_boxes": torch.tensor([[[1.6, 2.6, 4.8, 4.2], [-1.0, 0.0, 9.0, 8.0], [0.0, 0.0, 0.0, 0.0]]]),
               "detection_scores": torch.tensor([[0.9, 0.6, 0.0]]),
               "detection_classes": torch.tensor([[3, 7, 0]], dtype=torch.int32)}
    count, xyxy, scores, classes = (t.numpy() for t in nms_to_pixels(outputs, nms_box_map([(3, 5)], config)))
    np.testing.assert_allclose(xyxy[0, :2], [[1.0, 1.0, 3.0, 2.0], [0.0, 0.0, 5.0, 3.0]], rtol=0, atol=1e-6)  # clipped
    (dets,) = detections_from_nms(count, xyxy, scores, classes, threshold=0.7, labels=None)
    assert len(dets) == 1 and dets.label == ("class_3",)
    np.testing.assert_allclose(dets.to_numpy(), [[1, 1, 3, 2, 0.9, 3]], rtol=0, atol=1e-6)
