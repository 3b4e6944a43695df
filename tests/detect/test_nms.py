"""Issue 37: the fixed-shape NMS graph (``trtforge.passes.nms``) equals greedy class-aware NMS exactly (boxes,
scores, classes, order, count) on the raw heads of YOLOv8n, YOLO11n and YOLOv5nu (ultralytics' model
definitions, BatchNorm re-estimated; ``make setup`` exports them with PyTorch's raw outputs on 16 letterboxed
photos), run in ONNX Runtime; and a head that does not match its layout is refused in one line.

The NMS reads a graph whose input is the raw head, so each case costs the NMS alone (~0.1 s for 16 photos).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from detect_reference import YOLO_NAMES, assert_same_detections, xywh_to_xyxy, yolo_file
from onnx import TensorProto, helper

from trtforge.core.errors import ConfigError, InvalidArgument
from trtforge.core.ort_session import session
from trtforge.core.postprocess import NMS, NMS_OUTPUTS
from trtforge.passes.graph import load_ir, proto_bytes
from trtforge.passes.nms import NMS_ROUNDS, append_nms


def head_graph(*shapes: tuple[int, ...]) -> ir.Model:
    """A graph whose outputs are its inputs (``head0``, ``head1``, ...): the raw head, fed directly, batch N."""
    names = [f"head{i}" for i in range(len(shapes))]
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["N", *s]) for n, s in zip(names, shapes, strict=True)]
    outputs = [helper.make_tensor_value_info(n + "_out", TensorProto.FLOAT, ["N", *s]) for n, s in zip(names, shapes, strict=True)]
    nodes = [helper.make_node("Identity", [n], [n + "_out"], name=n) for n in names]
    graph = helper.make_graph(nodes, "head", inputs, outputs)
    return load_ir(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def run_nms(raw: list[np.ndarray], nms: NMS) -> list[np.ndarray]:
    model = append_nms(head_graph(*(r.shape[1:] for r in raw)), nms)
    onnx.checker.check_model(ir.serde.serialize_model(model))
    return session(proto_bytes(model)).run(list(NMS_OUTPUTS), {f"head{i}": r for i, r in enumerate(raw)})


@pytest.fixture(scope="module", params=YOLO_NAMES)
def yolo_raw(request) -> np.ndarray:
    """PyTorch's raw head (16, 84, A) on the 16 letterboxed photos, for each of the three models."""
    return np.load(yolo_file(f"{request.param}.raw.npy"))


@pytest.fixture(scope="module")
def v8_raw() -> np.ndarray:
    """YOLOv8n's raw head alone: the layout and shape cases need one model's numbers."""
    return np.load(yolo_file("yolov8n.raw.npy"))


@pytest.mark.parametrize("nms", [
    NMS("yolo"),  # ultralytics' defaults: more boxes than max_detections on some photos, fewer on others
    NMS("yolo", score_threshold=0.05, iou_threshold=0.6, max_detections=300, candidates=1000),
    NMS("yolo", score_threshold=0.2, iou_threshold=0.3, max_detections=20, candidates=60, class_agnostic=True),
], ids=["defaults", "low-threshold", "agnostic-few-candidates"])
def test_yolo_nms_equals_greedy(yolo_raw, nms):
    outputs = run_nms([yolo_raw], nms)
    rows = yolo_raw.transpose(0, 2, 1)
    counts = assert_same_detections(outputs, xywh_to_xyxy(rows[..., :4]), rows[..., 4:], nms)
    if not nms.class_agnostic:  # truncated lists and short ones
        assert max(counts) == nms.max_detections and min(counts) < nms.max_detections
    assert outputs[0].dtype == np.int32 and outputs[3].dtype == np.int32
    assert outputs[1].shape == (16, nms.max_detections, 4) and outputs[2].shape == (16, nms.max_detections)


def test_no_box_above_threshold(yolo_raw):
    nms = NMS("yolo", score_threshold=0.999)
    outputs = run_nms([yolo_raw], nms)
    rows = yolo_raw.transpose(0, 2, 1)
    counts = assert_same_detections(outputs, xywh_to_xyxy(rows[..., :4]), rows[..., 4:], nms)
    assert 0 in counts and max(counts) > 0


def test_yolov5_layout_with_objectness(v8_raw):
    """YOLOv5's (N, A, 5+C): each class score is multiplied by the box's objectness."""
    rows = v8_raw.transpose(0, 2, 1)
    objectness = np.random.default_rng(0).uniform(0.5, 1.0, rows.shape[:2] + (1,)).astype(np.float32)
    raw = np.ascontiguousarray(np.concatenate([rows[..., :4], objectness, rows[..., 4:]], -1))
    nms = NMS("yolov5", score_threshold=0.2)
    outputs = run_nms([raw], nms)
    assert_same_detections(outputs, xywh_to_xyxy(rows[..., :4]), rows[..., 4:] * objectness, nms)


def test_boxes_scores_layout(v8_raw):
    rows = v8_raw.transpose(0, 2, 1)
    boxes, scores = np.ascontiguousarray(xywh_to_xyxy(rows[..., :4])), np.ascontiguousarray(rows[..., 4:])
    nms = NMS("boxes-scores", max_detections=50)
    assert_same_detections(run_nms([scores, boxes], nms), boxes, scores, nms)  # found by shape, either order


def chain(links: int) -> tuple[np.ndarray, np.ndarray, NMS]:
    """A row of ``links + 1`` boxes each overlapping the next (IoU 0.6 > 0.45, the one after next 0.33), scores
    falling along the row: greedy NMS keeps every other box, and each decision waits on the one before."""
    n = links + 1
    x = np.arange(n, dtype=np.float32) * 4
    boxes = np.stack([x, np.zeros(n, np.float32), x + 16, np.full(n, 16, np.float32)], 1)[None]
    scores = np.linspace(0.9, 0.5, n, dtype=np.float32)[None, :, None]
    return boxes, scores, NMS("boxes-scores", max_detections=n, candidates=n)


def test_dynamic_anchors_and_fewer_anchors_than_candidates(v8_raw):
    """A head exported with dynamic image sizes has a dynamic anchor count, and a small image has fewer anchors
    than candidates: the candidates are padded with boxes that never pass, the outputs stay (N, K)."""
    nms = NMS("yolo", score_threshold=0.1)
    model = append_nms(head_graph((84, "A")), nms)
    detector = session(proto_bytes(model))
    for anchors in (2100, 500):
        raw = np.ascontiguousarray(v8_raw[..., :anchors])
        outputs = detector.run(list(NMS_OUTPUTS), {"head0": raw})
        rows = raw.transpose(0, 2, 1)
        counts = assert_same_detections(outputs, xywh_to_xyxy(rows[..., :4]), rows[..., 4:], nms)
        assert outputs[1].shape == (16, 100, 4) and min(counts) < 100


def test_suppression_chain_bound():
    """Exact for a chain of NMS_ROUNDS links (the stated bound), and not one link past it."""
    boxes, scores, nms = chain(NMS_ROUNDS)
    assert assert_same_detections(run_nms([boxes, scores], nms), boxes, scores, nms) == [NMS_ROUNDS // 2 + 1]
    boxes, scores, nms = chain(NMS_ROUNDS + 1)
    with pytest.raises(AssertionError, match="greedy NMS keeps"):
        assert_same_detections(run_nms([boxes, scores], nms), boxes, scores, nms)


@pytest.mark.parametrize(("nms", "shapes", "message"), [
    (NMS("yolo"), [(2100, 84)], "(N, A, 5+C) is yolov5's"),
    (NMS("yolov5"), [(84, 2100)], "(N, 4+C, A) is yolo's"),
    (NMS("boxes-scores"), [(84, 2100)], "boxes-scores reads two outputs"),
    (NMS("yolo"), [(84, 2100), (2100, 4)], "yolo reads one output"),
    (NMS("boxes-scores"), [(2100, 4), (1000, 80)], "scores (N, A, C), the same A"),
    (NMS("yolo"), [(84, 2100, 2)], "each head output must be rank 3"),
])
def test_head_that_does_not_match_is_refused(nms, shapes, message):
    with pytest.raises(InvalidArgument, match="do not match head layout") as caught:
        append_nms(head_graph(*shapes), nms)
    assert message in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"head": "ssd"}, "unknown head layout"),
    ({"head": "yolo", "score_threshold": 0.0}, r"NMS\(score_threshold=0.0\): give a number in \(0, 1\)"),
    ({"head": "yolo", "iou_threshold": 1.0}, r"NMS\(iou_threshold=1.0\): give a number in \(0, 1\)"),
    ({"head": "yolo", "max_detections": 300, "candidates": 200}, "above the 200 candidates"),
    ({"head": "yolo", "candidates": 5000}, r"NMS\(candidates=5000\): TensorRT's TopK takes at most 3840"),
])
def test_bad_settings_are_refused(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        NMS(**kwargs)


def test_quantization_leaves_the_nms_out():
    """INT8/FP8 placement sees the detector as it was: no NMS MatMul is a quantization candidate, and the head's
    last convolutions stay the final head (the NMS's MatMuls after them are not layers of the model)."""
    from trtforge.quantize.placement import analyse

    model = load_ir(yolo_file("yolov8n.onnx"))
    before = {c.output: c.is_head for c in analyse(model).candidates}
    after = {c.output: c.is_head for c in analyse(append_nms(model, NMS("yolo"))).candidates}
    assert after == before and sum(before.values()) == 4  # the 3 class convolutions and the DFL convolution


def test_trtforge_never_imports_ultralytics():
    """ultralytics is AGPL and pulls a torchvision that cannot import here: tests, examples and bench only."""
    import ast
    from pathlib import Path

    import trtforge

    found = []
    for path in Path(trtforge.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            found += [f"{path.name}: {n}" for n in names if n.split(".")[0] in ("ultralytics", "torchvision")]
    assert not found


def test_fp16_head_is_read_in_fp32(v8_raw):
    """A model exported in FP16: the NMS casts its head to FP32 and decides on those values."""
    raw = v8_raw.astype(np.float16)
    graph = helper.make_graph([helper.make_node("Identity", ["head0"], ["head0_out"], name="head0")], "head",
                              [helper.make_tensor_value_info("head0", TensorProto.FLOAT16, ["N", 84, 2100])],
                              [helper.make_tensor_value_info("head0_out", TensorProto.FLOAT16, ["N", 84, 2100])])
    nms = NMS("yolo")
    model = append_nms(load_ir(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])), nms)
    outputs = session(proto_bytes(model)).run(list(NMS_OUTPUTS), {"head0": raw})
    rows = raw.astype(np.float32).transpose(0, 2, 1)
    assert_same_detections(outputs, xywh_to_xyxy(rows[..., :4]), rows[..., 4:], nms)


def test_ultralytics_dynamic_export():
    """ultralytics' dynamic export declares every dim of output0 by name, the 84 channels too: shape inference
    finds them, and the NMS follows the anchors of each image size (2100 at 320², 1344 at 256²)."""
    path = yolo_file("yolov8n_dynamic.onnx")
    raw_model = session(path)
    detector = session(proto_bytes(append_nms(load_ir(path), NMS("yolo"))))
    images = np.load(yolo_file("photos.npz"))["images"][:4].astype(np.float32) / 255
    for x in (images, np.ascontiguousarray(images[:, :, 32:288, 32:288])):
        rows = raw_model.run(None, {"images": x})[0].transpose(0, 2, 1)
        outputs = detector.run(list(NMS_OUTPUTS), {"images": x})
        assert_same_detections(outputs, xywh_to_xyxy(rows[..., :4]), rows[..., 4:], NMS("yolo"))
