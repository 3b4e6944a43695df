"""A tiny SSD-style detector in plain PyTorch whose ONNX graph ends in data-dependent post-processing
(``NonZero``, ``NonMaxSuppression``), as torchvision's detectors do: what ``--outputs boxes,scores`` cuts and
``--nms boxes-scores`` replaces (tests/detect/test_cut_ssd.py, docs/tutorial-detect.md).

Anchors on two feature maps (strides 16 and 32, two a cell: 1000 at 320²), box deltas decoded against them
(SSD's 0.1/0.2 variances), softmax scores with a background class; BatchNorm statistics re-estimated on
photos so that scores vary as a trained model's do.

Example:
    >>> ssd_onnx("ssd.onnx", images)      # images: (N, 3, 320, 320) float32 in [0, 1]
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import torch
from onnx import helper

CLASSES, ANCHORS_PER_CELL, SIZE = 4, 2, 320


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


def ssd_onnx(path: str | Path, images: np.ndarray) -> Path:
    """TinySSD, BatchNorm re-estimated on ``images``, exported to ``path`` at batch 1; its graph ends in
    NonZero and NonMaxSuppression (``boxes`` and ``scores`` are tensors inside it, not outputs)."""
    torch.manual_seed(0)
    model = TinySSD()
    x = torch.from_numpy(images)
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.momentum = None
    with torch.no_grad():
        model.train()(x)
    path = Path(path)
    torch.onnx.export(model.eval(), (x[:1],), str(path), dynamo=False, opset_version=17,
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
    proto.graph.output.extend([confident, helper.make_tensor_value_info("selected", onnx.TensorProto.INT64,
                                                                        ["selected", 3])])
    onnx.save(proto, path)
    return path
