"""Issue 37: a detector whose graph ends in data-dependent post-processing (``NonZero``, ``NonMaxSuppression``:
TensorRT-RTX cannot build it) is cut at its raw head with ``--outputs boxes,scores`` and given the fixed-shape
NMS with ``--nms boxes-scores``. The detector is SSD-style, in plain PyTorch (anchors on two feature maps,
box deltas decoded against them, softmax scores with a background class), BatchNorm statistics re-estimated on
the 16 letterboxed photos. The FP32 graph TensorRT-RTX built from gives, in ONNX Runtime, exactly greedy NMS's
detections on the cut head's outputs; the sidecar records the cut."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from cli_in_process import run
from detect_reference import assert_same_detections, yolo_file
from tiny_ssd import ssd_onnx as make_ssd_onnx

from trtforge.core.ort_session import session
from trtforge.core.postprocess import NMS, NMS_OUTPUTS
from trtforge.passes.cut import cut_graph
from trtforge.passes.graph import load_ir, proto_bytes

SETTINGS = NMS("boxes-scores", score_threshold=0.7, iou_threshold=0.5, max_detections=100, candidates=400)


@pytest.fixture(scope="module")
def ssd_onnx(tmp_path_factory):
    """TinySSD (tests/detect/tiny_ssd.py) exported, its graph ending in NonZero and NonMaxSuppression."""
    images = np.load(yolo_file("photos.npz"))["images"].astype(np.float32) / 255
    return make_ssd_onnx(tmp_path_factory.mktemp("ssd") / "ssd.onnx", images), images


def test_cut_head_with_nms_equals_greedy(ssd_onnx, tmp_path):
    path, images = ssd_onnx
    assert {n.op_type for n in onnx.load(path).graph.node} >= {"NonZero", "NonMaxSuppression"}
    nms = ["--nms", "boxes-scores", "--score-threshold", str(SETTINGS.score_threshold), "--iou-threshold",
           str(SETTINGS.iou_threshold), "--max-detections", str(SETTINGS.max_detections), "--nms-candidates",
           str(SETTINGS.candidates)]
    done = run(["build", str(path), "--outputs", "boxes,scores", *nms, "--precision", "fp32", "--opt-level", "0",
                "-o", str(tmp_path), "-q"])
    assert done.returncode == 0, done.stderr
    sidecar = json.loads((tmp_path / "ssd_fp32.json").read_text())
    assert [o["name"] for o in sidecar["outputs"]] == list(NMS_OUTPUTS)
    assert any(note.startswith("graph cut at outputs boxes, scores (") for note in sidecar["notes"])
    edits = {k: sidecar["graph_edits"]["nms"][k] for k in ("head", "score_threshold", "candidates", "outputs")}
    assert sidecar["graph_edits"]["outputs"] == ["boxes", "scores"] and sidecar["builder"]["config"]["outputs"] == [
        "boxes", "scores"] and edits == {"head": "boxes-scores", "score_threshold": 0.7, "candidates": 400,
                                         "outputs": list(NMS_OUTPUTS)}
    built = onnx.load(tmp_path / "ssd_fp32.onnx")
    assert not {"NonZero", "NonMaxSuppression"} & {n.op_type for n in built.graph.node}

    head = load_ir(onnx.load(path))
    cut_graph(head, ("boxes", "scores"))
    raw = session(proto_bytes(head))
    detector = session(tmp_path / "ssd_fp32.onnx")
    heads = [raw.run(["boxes", "scores"], {"images": x[None]}) for x in images]
    runs = [detector.run(list(NMS_OUTPUTS), {"images": x[None]}) for x in images]
    boxes, scores = (np.concatenate([h[i] for h in heads]) for i in range(2))
    counts = assert_same_detections([np.concatenate([r[i] for r in runs]) for i in range(4)], boxes, scores, SETTINGS)
    assert max(counts) == SETTINGS.max_detections and min(counts) < SETTINGS.max_detections


def test_uncut_graph_refusal_names_the_cut(ssd_onnx, tmp_path):
    """TensorRT-RTX refuses the NonZero; the line says how to keep it out of the engine."""
    path, _ = ssd_onnx
    done = run(["build", str(path), "--precision", "fp32", "--opt-level", "0", "-o", str(tmp_path), "-q", "--no-cache"])
    assert done.returncode == 2, done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert "node '/NonZero' (NonZero)" in line and line.endswith(
        "keep it out of the engine: --outputs NAME[,NAME] cuts the graph before it and --nms HEAD appends a "
        "fixed-shape NMS"), line
