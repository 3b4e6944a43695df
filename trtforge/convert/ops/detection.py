"""Detectors' ops from torchvision: ``roi_align`` (``torchvision.ops.roi_align`` / ``RoIAlign`` /
``MultiScaleRoIAlign``'s levels) at a fixed sampling ratio.

torchvision registers its ops as ``torch.ops.torchvision.*``, so a module that calls them reaches the direct path as
``torchvision.roi_align.default`` (torchvision itself is never imported here). ``nms`` has no converter on purpose:
``convert/refusals.py`` says why and what to do instead.

RoIAlign is written as torchvision's CPU kernel computes it (``roi_align_common.h``): per roi ``k`` (a row
``batch_index, x1, y1, x2, y2``), per output bin, ``sampling_ratio²`` sample points; each sample is the bilinear
value at its (y, x) clamped to the map (a point beyond [-1, H] × [-1, W] counts 0), and the bin is their mean. The
four corner pixels of every sample are gathered from the feature map laid out as ``(N·H·W, C)`` by their flat index
``b·H·W + y·W + x``, so the network holds ``4 · K · (ph·sr) · (pw·sr) · C`` values, not a copy of the map per roi.
The coordinates and weights are FP32 at every precision. An adaptive ``sampling_ratio`` (≤ 0: ``ceil(roi size /
bins)`` samples, a count that depends on each roi) is refused.

Example:
    >>> torch.ops.torchvision.roi_align(features, rois, 0.25, 7, 7, 2, True)   # in a module: converted
"""

from __future__ import annotations

import torch

from trtforge.convert.context import Context, example
from trtforge.convert.network import Tensor
from trtforge.convert.registry import converter


def _roi_align_ok(node) -> str | None:
    x, rois = example(node.args[0]), example(node.args[1])
    sampling_ratio = node.args[5]
    if not isinstance(sampling_ratio, int) or sampling_ratio <= 0:
        return (f"sampling_ratio={sampling_ratio}: an adaptive sample count (ceil(roi size / bins)) depends on each "
                "roi; pass sampling_ratio > 0 (torchvision's detectors use 2)")
    if x is None or rois is None or x.dim() != 4 or rois.dim() != 2 or rois.shape[1] != 5:
        return "roi_align needs a (N, C, H, W) feature map and (K, 5) rois"
    if any(not isinstance(d, int) for d in x.shape[1:]):
        return "roi_align needs static channel and spatial dims (only the batch may be dynamic)"
    if not isinstance(node.args[3], int) or not isinstance(node.args[4], int):
        return "roi_align needs a static output size"
    return None


@converter("torchvision.roi_align.default", validator=_roi_align_ok)
def roi_align(ctx: Context, node, args):
    x, rois, scale, ph, pw, sr, aligned = args
    feature = ctx.net.cast(ctx.tensor(x), torch.float32)
    _n, channels, height, width = feature.shape
    boxes = ctx.tensor(rois, dtype=torch.float32)
    corners = [_column(ctx, boxes, i, scale, 0.5 if aligned else 0.0) for i in range(1, 5)]
    ys, valid_y = _samples(ctx, corners[1], corners[3], ph, sr, height, aligned, axis=1)
    xs, valid_x = _samples(ctx, corners[0], corners[2], pw, sr, width, aligned, axis=2)
    flat = ctx.net.shuffle(feature, first=(0, 2, 3, 1), reshape=(-1, channels))  # (N·H·W, C)
    base = _mul(ctx, ctx.net.cast(_column(ctx, boxes, 0, 1.0, 0.0), torch.int32), height * width)  # (K, 1)
    base = ctx.net.shuffle(base, reshape=(0, 1, 1))
    value = None
    for y_index, y_weight in ys:
        row = ctx.net.elementwise(base, _mul(ctx, y_index, width), "SUM")
        for x_index, x_weight in xs:
            pixels = ctx.net.gather(flat, ctx.net.elementwise(row, x_index, "SUM"), 0)  # (K, P, Q, C)
            term = ctx.net.elementwise(pixels, ctx.net.elementwise(y_weight, x_weight, "PROD"), "PROD")
            value = term if value is None else ctx.net.elementwise(value, term, "SUM")
    valid = ctx.net.elementwise(valid_y, valid_x, "AND")
    value = ctx.net.select(valid, value, ctx.tensor(0.0, like=value))
    bins = ctx.net.reduce(ctx.net.shuffle(value, reshape=(0, ph, sr, pw, sr, channels)), "AVG", (2, 4), False)
    out = ctx.net.shuffle(bins, first=(0, 3, 1, 2))  # (K, C, ph, pw)
    return ctx.net.cast(out, ctx.out_dtype(node))


def _column(ctx: Context, boxes: Tensor, index: int, scale: float, offset: float) -> Tensor:
    """Column ``index`` of the (K, 5) rois, ``· scale − offset``: (K, 1)."""
    col = ctx.net.gather(boxes, ctx.net.constant(torch.tensor([index], dtype=torch.int32)), 1)
    if scale == 1.0 and offset == 0.0:
        return col
    scaled = ctx.net.elementwise(col, ctx.tensor(float(scale), like=col), "PROD")
    return ctx.net.elementwise(scaled, ctx.tensor(float(offset), like=col), "SUB")


def _mul(ctx: Context, x: Tensor, factor: int) -> Tensor:
    return ctx.net.elementwise(x, ctx.tensor(torch.tensor(factor, dtype=torch.int32), like=x), "PROD")


def _samples(ctx: Context, start: Tensor, end: Tensor, bins: int, sr: int, size: int, aligned: bool, axis: int):
    """The sample coordinates along one axis of every roi (``bins · sr`` of them), as the kernel computes them:
    ``[(low index, low weight), (high index, high weight)]`` and the inside mask, each shaped (K, P, 1, 1)
    for y (``axis=1``) or (K, 1, Q, 1) for x (``axis=2``)."""
    net = ctx.net
    length = net.elementwise(end, start, "SUB")
    if not aligned:
        length = net.elementwise(length, ctx.tensor(1.0, like=length), "MAX")
    step = net.elementwise(length, ctx.tensor(float(bins), like=length), "DIV")  # one bin
    offsets = torch.tensor([[p + (i + 0.5) / sr for p in range(bins) for i in range(sr)]], dtype=torch.float32)
    coord = net.elementwise(start, net.elementwise(net.constant(offsets), step, "PROD"), "SUM")  # (K, bins·sr)
    shape = (0, bins * sr, 1, 1) if axis == 1 else (0, 1, bins * sr, 1)
    coord = net.shuffle(coord, reshape=shape)

    def at_least(v, bound):  # v >= bound, false for NaN
        b = ctx.tensor(float(bound), like=v)
        return net.elementwise(net.elementwise(v, b, "GREATER"), net.elementwise(v, b, "EQUAL"), "OR")

    def at_most(v, bound):
        b = ctx.tensor(float(bound), like=v)
        return net.elementwise(net.elementwise(v, b, "LESS"), net.elementwise(v, b, "EQUAL"), "OR")

    inside = net.elementwise(at_least(coord, -1), at_most(coord, size), "AND")
    clamped = net.elementwise(net.elementwise(coord, ctx.tensor(0.0, like=coord), "MAX"),
                              ctx.tensor(float(size - 1), like=coord), "MIN")
    low = net.unary(clamped, "FLOOR")
    high = net.elementwise(net.elementwise(low, ctx.tensor(1.0, like=low), "SUM"),
                           ctx.tensor(float(size - 1), like=low), "MIN")
    frac = net.elementwise(clamped, low, "SUB")
    rest = net.elementwise(ctx.tensor(1.0, like=frac), frac, "SUB")
    squeeze = (0, bins * sr, 1) if axis == 1 else (0, 1, bins * sr)
    index = [net.shuffle(net.cast(v, torch.int32), reshape=squeeze) for v in (low, high)]  # (K, P, 1) / (K, 1, Q)
    return [(index[0], rest), (index[1], frac)], inside
