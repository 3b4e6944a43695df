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
import torch
from cli_in_process import run
from detect_reference import assert_same_detections, yolo_file
from onnx import helper

from trtforge.core.ort_session import session
from trtforge.core.postprocess import NMS, NMS_OUTPUTS
from trtforge.passes.cut import cut_graph
from trtforge.passes.graph import load_ir, proto_bytes

CLASSES, ANCHORS_PER_CELL, SIZE = 4, 2, 320
SETTINGS = NMS("boxes-scores", score_threshold=0.7, iou_threshold=0.5, max_detections=100, candidates=400)


def block(cin: int, cout: int, stride: int = 2) -> torch.nn.Sequential:
    return torch.nn.Sequential(torch.nn.Conv2d(cin, cout, 3, stride, 1, bias=False), torch.nn.BatchNorm2d(cout),
                               torch.nn.ReLU())


def head(cin: int, cout: int, spread: float) -> torch.nn.Sequential:
    """A prediction conv whose outputs BatchNorm spreads to ``spread`` standard deviations on the photos."""
    norm = torch.nn.BatchNorm2d(cout)
    torch.nn.init.constant_(norm.weight, spread)
    return torch.nn.Sequential(torch.nn.Conv2d(cin, cout, 3, 1, 1), norm)


class TinySSD(torch.nn.Module):
    """Two feature maps (strides 16 and 32), two anchors a cell; ends in NonZero of the confident boxes."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Sequential(block(3, 16), block(16, 32), block(32, 32), block(32, 64))
        self.down = block(64, 64)
        self.loc = torch.nn.ModuleList(head(64, ANCHORS_PER_CELL * 4, 0.5) for _ in range(2))
        self.cls = torch.nn.ModuleList(head(64, ANCHORS_PER_CELL * (CLASSES + 1), 2.0) for _ in range(2))
        anchors = []
        for stride, sizes in ((16, (48.0, 80.0)), (32, (112.0, 176.0))):
            cells = (torch.arange(SIZE // stride, dtype=torch.float32) + 0.5) * stride
            cy, cx = torch.meshgrid(cells, cells, indexing="ij")
            wh = torch.tensor(sizes).view(1, 1, -1).expand(*cx.shape, -1)
            anchors.append(torch.stack([cx[..., None].expand_as(wh), cy[..., None].expand_as(wh), wh, wh], -1)
                           .reshape(-1, 4))
        self.register_buffer("anchors", torch.cat(anchors))

    def forward(self, images: torch.Tensor):
        first = self.stem(images)
        features = (first, self.down(first))
        n = images.shape[0]
        deltas = torch.cat([m(f).permute(0, 2, 3, 1).reshape(n, -1, 4) for m, f in zip(self.loc, features, strict=True)], 1)
        logits = torch.cat([m(f).permute(0, 2, 3, 1).reshape(n, -1, CLASSES + 1)
                            for m, f in zip(self.cls, features, strict=True)], 1)
        a = self.anchors
        centre = a[:, :2] + deltas[..., :2] * 0.1 * a[:, 2:]
        half = a[:, 2:] * torch.exp(deltas[..., 2:] * 0.2) * 0.5
        boxes = torch.cat([centre - half, centre + half], -1)
        scores = torch.softmax(logits, -1)[..., 1:]
        return boxes, scores, torch.nonzero(scores.amax(-1) > 0.3)


@pytest.fixture(scope="module")
def ssd_onnx(tmp_path_factory):
    """TinySSD exported, its graph ending in NonZero and NonMaxSuppression (boxes and scores inside it)."""
    torch.manual_seed(0)
    model = TinySSD()
    images = torch.from_numpy(np.load(yolo_file("photos.npz"))["images"]).float() / 255
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.momentum = None
    with torch.no_grad():
        model.train()(images)
    path = tmp_path_factory.mktemp("ssd") / "ssd.onnx"
    torch.onnx.export(model.eval(), (images[:1],), str(path), dynamo=False, opset_version=17,
                      input_names=["images"], output_names=["boxes", "scores", "confident"])
    proto = onnx.load(path)
    proto.graph.node.extend([
        helper.make_node("Transpose", ["scores"], ["scores_by_class"], perm=[0, 2, 1]),
        helper.make_node("NonMaxSuppression", ["boxes", "scores_by_class", "max_out", "iou", "threshold"],
                         ["selected"], name="nms")])
    proto.graph.initializer.extend([onnx.numpy_helper.from_array(np.array([50], np.int64), "max_out"),
                                    onnx.numpy_helper.from_array(np.array([0.5], np.float32), "iou"),
                                    onnx.numpy_helper.from_array(np.array([0.3], np.float32), "threshold")])
    confident = next(o for o in proto.graph.output if o.name == "confident")
    del proto.graph.output[:]
    proto.graph.output.extend([confident, helper.make_tensor_value_info("selected", onnx.TensorProto.INT64, ["selected", 3])])
    onnx.save(proto, path)
    return path, images.numpy()


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
