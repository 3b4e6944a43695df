"""Issue 37: the PyTorch routes' NMS (``trtforge.runtime.torch_nms``) gives exactly what the ONNX NMS
(``trtforge.passes.nms``, run in ONNX Runtime) gives on the same raw heads: bit-equal boxes and scores, the same
classes, order and count; and a PyTorch route over a YOLO-like module appends it (the four outputs, one program).

Both NMS run on the saved raw heads of make setup's YOLO files (the first letterboxed photos: lists truncated at
max_detections and short ones), so no detector runs here; test_nms.py shows the ONNX NMS equal to greedy NMS on all 16.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from detect_reference import YOLO_NAMES, assert_same_detections, xywh_to_xyxy, yolo_file
from test_nms import chain, run_nms

from trtforge.core.errors import InvalidArgument
from trtforge.core.postprocess import NMS, NMS_OUTPUTS, NMS_ROUNDS
from trtforge.core.specs import TensorSpec
from trtforge.runtime.torch_nms import TorchNMS
from trtforge.runtime.torch_routes import TorchEngine

CASES = {
    "defaults": NMS("yolo"),
    "low-threshold": NMS("yolo", score_threshold=0.05, iou_threshold=0.6, max_detections=300, candidates=1000),
    "agnostic-few": NMS("yolo", score_threshold=0.2, iou_threshold=0.3, max_detections=20, candidates=60,
                        class_agnostic=True),
}


def torch_nms(raw: list[np.ndarray], nms: NMS) -> list[np.ndarray]:
    with torch.inference_mode():
        return [t.numpy() for t in TorchNMS(nms)(*(torch.from_numpy(r) for r in raw))]


def assert_identical(ours: list[np.ndarray], onnx: list[np.ndarray]) -> None:
    for name, a, b in zip(NMS_OUTPUTS, ours, onnx, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape, name
        np.testing.assert_array_equal(a, b, err_msg=name)


@pytest.mark.parametrize("case", list(CASES))
def test_torch_nms_equals_onnx_nms(case):
    """defaults: the first two photos of each model's head in one batch (a list truncated at max_detections and a
    short one from each); the other settings on YOLOv8n's first photos."""
    if case == "defaults":
        raw = np.concatenate([np.load(yolo_file(f"{m}.raw.npy"))[:2] for m in YOLO_NAMES])
    else:
        raw = np.load(yolo_file("yolov8n.raw.npy"))[:3]
    nms = CASES[case]
    ours = torch_nms([raw], nms)
    assert_identical(ours, run_nms([raw], nms))
    rows = raw.transpose(0, 2, 1)  # and so greedy NMS's
    counts = assert_same_detections(ours, xywh_to_xyxy(rows[..., :4]), rows[..., 4:], nms)
    assert max(counts) == nms.max_detections or case == "agnostic-few"
    assert min(counts) < nms.max_detections


def test_boxes_scores_and_yolov5_layouts():
    """The other two layouts, and a head with fewer anchors than candidates (padded), equal the ONNX NMS."""
    raw = np.load(yolo_file("yolov8n.raw.npy"))[:2]
    rows = raw.transpose(0, 2, 1)
    boxes, scores = np.ascontiguousarray(xywh_to_xyxy(rows[..., :4])), np.ascontiguousarray(rows[..., 4:])
    nms = NMS("boxes-scores", max_detections=50)
    assert_identical(torch_nms([scores, boxes], nms), run_nms([scores, boxes], nms))
    objectness = np.random.default_rng(0).uniform(0.5, 1.0, rows.shape[:2] + (1,)).astype(np.float32)
    v5 = np.ascontiguousarray(np.concatenate([rows[..., :4], objectness, rows[..., 4:]], -1)[:, :500])
    nms = NMS("yolov5", score_threshold=0.2)
    assert_identical(torch_nms([v5], nms), run_nms([v5], nms))


def test_same_round_bound():
    """The same NMS_ROUNDS rounds: a suppression chain of that many links is exact, one more link is not, and
    the two implementations agree on both."""
    for links in (NMS_ROUNDS, NMS_ROUNDS + 1):
        boxes, scores, nms = chain(links)
        ours = torch_nms([boxes, scores], nms)
        assert_identical(ours, run_nms([boxes, scores], nms))
        assert (int(ours[0][0, 0]) == links // 2 + 1) == (links == NMS_ROUNDS)


class RawHead(torch.nn.Module):
    """Stands in for a detector: images (N, 3, H, W) → a yolo head (N, 84, A) read from a saved raw head."""

    def __init__(self, raw: np.ndarray) -> None:
        super().__init__()
        self.raw = torch.nn.Parameter(torch.from_numpy(raw), requires_grad=False)
        self.gain = torch.nn.Parameter(torch.ones(()), requires_grad=False)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.raw[: images.shape[0]] * (self.gain + images.mean() * 0)


def test_torch_route_appends_the_nms(tmp_path):
    """``trtforge.load`` of an artifact whose sidecar records the NMS (``graph_edits.nms``), on the eager route over
    a module that ends at its raw head: the NMS's four outputs with the recorded settings, equal to the ONNX NMS.
    A module whose output does not match the layout is one error line at the first call."""
    import trtforge
    from trtforge.core.sidecar import Sidecar, write_sidecar

    raw = np.load(yolo_file("yolov8n.raw.npy"))[:2]
    nms = NMS("yolo", score_threshold=0.3, max_detections=50)
    specs = [TensorSpec("images", "float32", (-1, 3, 32, 32))]
    outputs = [TensorSpec("num_detections", "int32", (-1, 1)), TensorSpec("detection_boxes", "float32", (-1, 50, 4)),
               TensorSpec("detection_scores", "float32", (-1, 50)), TensorSpec("detection_classes", "int32", (-1, 50))]
    record = {**nms.as_dict(), "rounds": NMS_ROUNDS, "outputs": list(NMS_OUTPUTS)}
    path = write_sidecar(tmp_path / "head.json", Sidecar(
        name="head", engine_file="head.engine", engine_size=1, engine_sha256="0" * 64, inputs=specs, outputs=outputs,
        profiles=(), precision={"built": "fp16"}, builder={"flavour": "tensorrt_rtx"}, source={"kind": "torch"},
        graph_edits={"nms": record}))
    engine = trtforge.load(path, route="eager", device="cpu", model=RawHead(raw))
    got = engine(torch.zeros(2, 3, 32, 32))
    assert list(got) == list(NMS_OUTPUTS)
    assert_identical([got[n].numpy() for n in NMS_OUTPUTS], run_nms([raw], nms))
    wrong = TorchEngine(RawHead(raw), specs, outputs, route="eager", device="cpu", postprocess=NMS("yolov5"))
    with pytest.raises(InvalidArgument, match="does not match head layout 'yolov5'") as caught:
        wrong(torch.zeros(1, 3, 32, 32))
    assert "\n" not in str(caught.value)
