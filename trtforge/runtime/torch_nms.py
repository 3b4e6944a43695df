"""The fixed-shape NMS in PyTorch, for the PyTorch routes (``eager``, ``fp16``, ``cuda_graph``, ``compiled``).

An artifact built with ``postprocess=trtforge.NMS(...)`` (``--nms HEAD``) gives detections on every route.
The engine and the ONNX Runtime route run the NMS as ONNX nodes that ``trtforge.passes.nms`` appends to the
graph; the PyTorch routes run the model's module, which ends at its raw head, so they append this module
instead. Two implementations of one algorithm, because each route runs its own kind of program (an ONNX graph,
a ``nn.Module``), and the runtime never imports the graph passes. The settings and their checks are one
definition (``trtforge.core.postprocess.NMS``, ``NMS_ROUNDS``); tests/detect/test_torch_nms.py shows the two
give identical outputs (bit-equal boxes and scores, same classes, order and count) on YOLO heads.

Step for step as ``passes.nms`` (its docstring states the semantics and the round bound): decode the head,
each box's best class, the ``candidates`` best scores above the threshold (a stable sort: equal scores keep
anchor order, as ONNX TopK and greedy NMS do), their IoU matrix in FP32, ``NMS_ROUNDS`` rounds of Cluster-NMS
matrix suppression, the first ``max_detections`` survivors in EfficientNMS's four outputs. Every shape is fixed
by the settings and the head, so a ``cuda_graph`` route captures model and NMS as one graph. The NMS computes
in FP32 whatever the route's precision (the float rule the engine's build records for its NMS nodes).

Example:
    >>> nms = TorchNMS(NMS("yolo", max_detections=100))
    >>> count, boxes, scores, classes = nms(raw_head)   # (N, 84, 8400) → (N, 1), (N, 100, 4), (N, 100), (N, 100)
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from trtforge.core.errors import InvalidArgument
from trtforge.core.postprocess import NMS, NMS_ROUNDS


def _check_head(nms: NMS, head: tuple[torch.Tensor, ...]) -> None:
    """One line naming the fix when the module's outputs do not match ``nms.head`` (``passes.nms.find_head``'s rules)."""
    shapes = ", ".join(str(tuple(t.shape)) for t in head)
    fix = "; choose the head that matches (yolo, yolov5, boxes-scores), or give a module that returns the raw head"
    wanted = {"yolo": 1, "yolov5": 1, "boxes-scores": 2}[nms.head]
    if len(head) != wanted or any(t.dim() != 3 for t in head):
        raise InvalidArgument(f"the module returns {len(head)} output(s) ({shapes}); head layout {nms.head!r} reads "
                              f"{wanted} rank-3 tensor(s){fix}")
    if nms.head != "boxes-scores":
        _, d1, d2 = head[0].shape
        channels, anchors = (d1, d2) if nms.head == "yolo" else (d2, d1)
        if channels <= (4 if nms.head == "yolo" else 5) or anchors <= channels:
            layout = "(N, 4+C, A)" if nms.head == "yolo" else "(N, A, 5+C)"
            raise InvalidArgument(f"the module's output {shapes} does not match head layout {nms.head!r}: {nms.head} "
                                  f"is {layout} with fewer channels than anchors{fix}")
    elif 4 not in (head[0].shape[2], head[1].shape[2]) or head[0].shape[1] != head[1].shape[1]:
        raise InvalidArgument(f"the module's outputs ({shapes}) do not match head layout 'boxes-scores': boxes "
                              f"(N, A, 4) and scores (N, A, C), the same A{fix}")


def decode(nms: NMS, head: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    """boxes (N, A, 4) x1, y1, x2, y2 and scores (N, A, C), FP32, from the raw head (``passes.nms._decode``)."""
    values = [t.float() for t in head]
    if nms.head == "boxes-scores":
        boxes, scores = values if values[0].shape[2] == 4 else values[::-1]  # found by shape, boxes first on a tie
        return boxes, scores
    rows = values[0].transpose(1, 2) if nms.head == "yolo" else values[0]  # (N, A, 4+C | 5+C)
    scores = rows[..., 4:] if nms.head == "yolo" else rows[..., 5:] * rows[..., 4:5]
    centre, half = rows[..., 0:2], rows[..., 2:4] * 0.5
    return torch.cat([centre - half, centre + half], 2), scores


def _candidates(nms: NMS, boxes: torch.Tensor, scores: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The ``candidates`` best boxes: sorted scores (-1 where none passed), their boxes and classes, valid mask."""
    k = nms.candidates
    best, best_class = scores.max(2)  # the lowest class index on a tie, as TopK 1 and argmax
    masked = torch.where(best > nms.score_threshold, best, -1.0)
    short = k - masked.shape[1]
    if short > 0:  # fewer anchors than candidates: pad with boxes that never pass
        masked = torch.cat([masked, masked.new_full((masked.shape[0], short), -1.0)], 1)
        boxes = torch.cat([boxes, boxes.new_zeros((boxes.shape[0], short, 4))], 1)
        best_class = torch.cat([best_class, best_class.new_zeros((best_class.shape[0], short))], 1)
    top, index = torch.sort(masked, dim=1, descending=True, stable=True)
    top, index = top[:, :k], index[:, :k]
    cand_boxes = torch.gather(boxes, 1, index.unsqueeze(2).expand(-1, -1, 4))
    return top, cand_boxes, torch.gather(best_class, 1, index).int(), top > nms.score_threshold


def _suppression(nms: NMS, boxes: torch.Tensor, classes: torch.Tensor) -> torch.Tensor:
    """``S (N, K, K)`` float: 1 where sorted candidate i would suppress candidate j (``passes.nms._suppression``)."""
    c = boxes.unsqueeze(3).unbind(2)  # (N, K, 1) each
    r = [v.transpose(1, 2) for v in c]  # (N, 1, K)
    zero = boxes.new_zeros(())
    x1, y1 = torch.maximum(c[0], r[0]), torch.maximum(c[1], r[1])
    x2, y2 = torch.minimum(c[2], r[2]), torch.minimum(c[3], r[3])
    inter = torch.maximum(x2 - x1, zero) * torch.maximum(y2 - y1, zero)
    area = (c[2] - c[0]) * (c[3] - c[1])
    union = (area + area.transpose(1, 2)) - inter
    position = torch.arange(boxes.shape[1], device=boxes.device)
    rule = (inter / union > nms.iou_threshold) & (position.unsqueeze(1) < position.unsqueeze(0))
    if not nms.class_agnostic:
        rule = rule & (classes.unsqueeze(2) == classes.unsqueeze(1))
    return rule.float()


class TorchNMS(nn.Module):
    """``NMS`` after a raw head, as a module: ``forward(*head)`` → the four ``NMS_OUTPUTS`` tensors."""

    def __init__(self, nms: NMS) -> None:
        super().__init__()
        self.nms = nms
        self._checked = False

    def forward(self, *head: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        nms, k, m = self.nms, self.nms.candidates, self.nms.max_detections
        if not self._checked:  # shapes are fixed per call site: the first call checks them, before any capture
            _check_head(nms, head)
            self._checked = True
        top, cand_boxes, cand_classes, valid = _candidates(nms, *decode(nms, head))
        suppress = _suppression(nms, cand_boxes, cand_classes)
        alive = valid.float().unsqueeze(1)  # (N, 1, K), 0/1: three kernels a round (in the ONNX graph: six)
        keep = alive
        for _ in range(NMS_ROUNDS):
            keep = alive * (torch.bmm(keep, suppress) < 0.5)  # not hit by a kept candidate (hits are whole numbers)
        keep = keep.squeeze(1) > 0
        order = k - torch.arange(k, device=top.device, dtype=torch.float32)
        chosen, position = torch.topk(torch.where(keep, order, 0.0), m, dim=1)  # survivors in candidate order
        found = chosen > 0
        count = keep.float().sum(1, keepdim=True).clamp(max=float(m)).int()
        out_boxes = torch.where(found.unsqueeze(2), torch.gather(cand_boxes, 1, position.unsqueeze(2).expand(-1, -1, 4)),
                                0.0)
        out_scores = torch.where(found, torch.gather(top, 1, position), 0.0)
        out_classes = torch.where(found, torch.gather(cand_classes, 1, position), 0)
        return count, out_boxes, out_scores, out_classes


class WithNMS(nn.Module):
    """A model (module or callable, e.g. an AOTInductor package) followed by ``TorchNMS``: the route's whole
    forward, so ``torch.compile`` and CUDA graph capture see model and NMS as one program."""

    def __init__(self, model: Any, nms: NMS) -> None:
        super().__init__()
        self.model = model
        self.nms = TorchNMS(nms)

    def forward(self, *inputs: Any) -> tuple[torch.Tensor, ...]:
        out = self.model(*inputs)
        head = (out,) if isinstance(out, torch.Tensor) else tuple(out.values()) if isinstance(out, dict) else tuple(out)
        return self.nms(*head)
