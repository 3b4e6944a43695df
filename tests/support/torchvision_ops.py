"""A stand-in for torchvision's ``nms`` and ``roi_align`` ops, registered as torchvision registers them.

torchvision cannot be imported here (its C++ ops need CUDA's libraries) and is never a dependency, but a user's
module that calls ``torchvision.ops.nms`` or ``roi_align`` reaches the direct path as a graph with
``torch.ops.torchvision.nms.default`` / ``roi_align.default``. ``register()`` defines those two ops in the
``torchvision`` namespace with torchvision's schemas (``torchvision/csrc/ops/nms.cpp``, ``roi_align.cpp``), a CPU
kernel in plain PyTorch (transcribed from ``torchvision/csrc/ops/cpu/nms_kernel.cpp`` and ``roi_align_kernel.cpp``)
and the fake kernels of ``torchvision/_meta_registrations.py`` (nms's output size is data-dependent: a new dynamic
size), so ``torch.export`` sees what it sees with torchvision installed. ``batched_nms`` is Python over ``nms``
(torchvision's coordinate trick, copied below), so it reaches the graph as ``nms``.

Call ``register()`` from a fixture (it is idempotent): the registration is process-wide.

Example:
    >>> register()
    >>> torch.ops.torchvision.nms(torch.tensor([[0., 0, 2, 2], [0, 0, 2, 2.1]]), torch.tensor([0.9, 0.8]), 0.5)
    tensor([0])
"""

from __future__ import annotations

import math

import torch

_LIBRARY: list[torch.library.Library] = []  # kept alive: dropping a Library object removes its ops

NMS_SCHEMA = "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor"
ROI_ALIGN_SCHEMA = ("roi_align(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, "
                    "SymInt pooled_width, int sampling_ratio, bool aligned) -> Tensor")


def register() -> None:
    """Define ``torchvision::nms`` and ``torchvision::roi_align`` (CPU and fake kernels), once per process."""
    if _LIBRARY:
        return
    lib = torch.library.Library("torchvision", "DEF")
    lib.define(NMS_SCHEMA)
    lib.define(ROI_ALIGN_SCHEMA)
    lib.impl("nms", nms_cpu, "CPU")
    lib.impl("roi_align", roi_align_cpu, "CPU")
    torch.library.register_fake("torchvision::nms", _nms_fake, lib=lib)
    torch.library.register_fake("torchvision::roi_align", _roi_align_fake, lib=lib)
    _LIBRARY.append(lib)


def _nms_fake(dets, scores, iou_threshold):
    torch._check(dets.dim() == 2, lambda: f"boxes should be a 2d tensor, got {dets.dim()}D")
    torch._check(dets.size(1) == 4, lambda: f"boxes should have 4 elements in dimension 1, got {dets.size(1)}")
    torch._check(scores.dim() == 1, lambda: f"scores should be a 1d tensor, got {scores.dim()}")
    torch._check(dets.size(0) == scores.size(0), lambda: "boxes and scores should have the same number of rows")
    return dets.new_empty(torch.library.get_ctx().new_dynamic_size(), dtype=torch.long)


def _roi_align_fake(input, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned):
    torch._check(rois.size(1) == 5, lambda: "rois must have shape as Tensor[K, 5]")
    torch._check(input.dtype == rois.dtype, lambda: "Expected tensor for input to have the same type as rois")
    return input.new_empty((rois.size(0), input.size(1), pooled_height, pooled_width))


def nms_cpu(dets: torch.Tensor, scores: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    """Greedy NMS: indices of the kept boxes by descending score; a box goes when IoU > threshold with a kept one."""
    if dets.numel() == 0:
        return torch.empty(0, dtype=torch.long)
    x1, y1, x2, y2 = dets.unbind(1)
    areas = (x2 - x1) * (y2 - y1)
    order = scores.sort(descending=True, stable=True).indices
    suppressed = torch.zeros(len(dets), dtype=torch.bool)
    keep = []
    for i in order.tolist():
        if suppressed[i]:
            continue
        keep.append(i)
        w = (torch.minimum(x2[i], x2) - torch.maximum(x1[i], x1)).clamp(min=0)
        h = (torch.minimum(y2[i], y2) - torch.maximum(y1[i], y1)).clamp(min=0)
        inter = w * h
        suppressed |= inter / (areas[i] + areas - inter) > iou_threshold
    return torch.tensor(keep, dtype=torch.long)


def batched_nms(boxes: torch.Tensor, scores: torch.Tensor, idxs: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    """torchvision's ``_batched_nms_coordinate_trick``: boxes of different classes offset apart, then ``nms``."""
    offsets = idxs.to(boxes) * (boxes.max() + torch.tensor(1).to(boxes))
    return torch.ops.torchvision.nms(boxes + offsets[:, None], scores, iou_threshold)


def roi_align_cpu(input: torch.Tensor, rois: torch.Tensor, spatial_scale: float, pooled_height: int,
                  pooled_width: int, sampling_ratio: int, aligned: bool) -> torch.Tensor:
    """RoIAlign as torchvision's CPU kernel computes it, one roi at a time: ``(K, C, ph, pw)``."""
    out = input.new_zeros((rois.size(0), input.size(1), pooled_height, pooled_width))
    for k, roi in enumerate(rois.tolist()):
        out[k] = _roi_align_one(input[int(roi[0])], roi[1:], spatial_scale, pooled_height, pooled_width,
                                sampling_ratio, aligned)
    return out


def _roi_align_one(feature, box, scale, ph, pw, sampling_ratio, aligned):
    offset = 0.5 if aligned else 0.0
    x1, y1, x2, y2 = (v * scale - offset for v in box)
    roi_w, roi_h = x2 - x1, y2 - y1
    if not aligned:
        roi_w, roi_h = max(roi_w, 1.0), max(roi_h, 1.0)
    bin_h, bin_w = roi_h / ph, roi_w / pw
    grid_h = sampling_ratio if sampling_ratio > 0 else math.ceil(roi_h / ph)
    grid_w = sampling_ratio if sampling_ratio > 0 else math.ceil(roi_w / pw)
    ys = torch.tensor([y1 + p * bin_h + (i + 0.5) * bin_h / grid_h for p in range(ph) for i in range(grid_h)])
    xs = torch.tensor([x1 + p * bin_w + (i + 0.5) * bin_w / grid_w for p in range(pw) for i in range(grid_w)])
    samples = _bilinear(feature, ys.to(feature.dtype), xs.to(feature.dtype))  # (C, ph*grid_h, pw*grid_w)
    c = feature.size(0)
    summed = samples.reshape(c, ph, grid_h, pw, grid_w).sum(dim=(2, 4))
    return summed / max(grid_h * grid_w, 1)


def _bilinear(feature, ys, xs):
    """Bilinear samples at every (y, x) of the grid ``ys × xs``; points outside [-1, H] × [-1, W] give 0."""
    height, width = feature.shape[1:]
    inside = ((ys >= -1) & (ys <= height))[:, None] & ((xs >= -1) & (xs <= width))[None, :]
    y, x = ys.clamp(min=0), xs.clamp(min=0)
    y_low, x_low = y.long(), x.long()
    y_top, x_top = y_low >= height - 1, x_low >= width - 1
    y_low, x_low = torch.where(y_top, height - 1, y_low), torch.where(x_top, width - 1, x_low)
    y_high, x_high = torch.where(y_top, height - 1, y_low + 1), torch.where(x_top, width - 1, x_low + 1)
    y, x = torch.where(y_top, y_low.to(y), y), torch.where(x_top, x_low.to(x), x)
    ly, lx = (y - y_low)[:, None], (x - x_low)[None, :]
    hy, hx = 1 - ly, 1 - lx
    value = (hy * hx * _at(feature, y_low, x_low) + hy * lx * _at(feature, y_low, x_high)
             + ly * hx * _at(feature, y_high, x_low) + ly * lx * _at(feature, y_high, x_high))
    return value * inside


def _at(feature, rows, cols):
    return feature[:, rows[:, None], cols[None, :]]


class NmsDetector(torch.nn.Module):
    """A tiny detector that ends in ``batched_nms``, as torchvision's detectors do: a convolution's 5 maps are
    per-anchor boxes (x, y, w, h) and a score; a positive score is class 1, else class 0."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 5, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.conv(x)[0].flatten(1).T  # (A, 5)
        boxes = torch.cat([out[:, :2], out[:, :2] + out[:, 2:4].abs() + 0.1], 1)
        keep = batched_nms(boxes, out[:, 4].sigmoid(), (out[:, 4] > 0).long(), 0.5)
        return boxes[keep]


def nms_detector() -> NmsDetector:
    """The CLI's factory (``trtforge build torchvision_ops:nms_detector --path direct``): registers the ops first."""
    register()
    torch.manual_seed(0)
    return NmsDetector().eval()
