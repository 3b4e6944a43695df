"""Issue 37: the direct path and torchvision's detector ops, as a module that calls them is captured
(``torch.ops.torchvision.*``; tests/support/torchvision_ops.py registers them as torchvision does, with CPU kernels
in plain PyTorch, since torchvision cannot be imported here).

- ``nms`` / ``batched_nms``: its output size depends on the data. ``compile(path="direct")`` refuses it in one line
  naming the op and the fixes (Python and CLI spellings) before anything is built; with ``min_block_size`` it runs in
  PyTorch with everything after it, and the partition report says why.
- ``roi_align``: converted at a fixed sampling ratio; the reference evaluator's output equals the CPU kernel's (rois
  partly outside the map, smaller than a pixel, of either image; aligned or not), and the network builds with
  TensorRT-RTX. An adaptive sampling ratio is refused with its reason.
"""

from __future__ import annotations

import pytest
import torch
from cli_in_process import run
from convert_check import check
from torchvision_ops import nms_detector, register, roi_align_cpu

import trtforge
from trtforge.convert.context import ConversionRefused
from trtforge.convert.lower import UnsupportedOp
from trtforge.convert.partition import partition

pytestmark = pytest.mark.needs_trt

NMS_WORDS = ("torchvision.nms.default", "torchvision.ops.nms or batched_nms", "output size depends on the data")


@pytest.fixture(scope="module", autouse=True)
def _torchvision_ops():
    register()


def test_nms_refused_before_any_build(tmp_path):
    cache = tmp_path / "cache"
    with pytest.raises(UnsupportedOp) as refused:
        trtforge.compile(nms_detector(), (torch.randn(1, 3, 8, 8),), path="direct", batch=1, cache_dir=cache,
                         output_dir=tmp_path / "out", progress=False)
    line = str(refused.value)
    assert "\n" not in line and all(w in line for w in NMS_WORDS), line
    assert "path='onnx', postprocess=trtforge.NMS('boxes-scores')" in line and "min_block_size=3" in line
    assert not _stored(cache), "nothing may reach the engine cache"
    assert not list(tmp_path.rglob("*.engine"))

    done = run(["build", "torchvision_ops:nms_detector", "--path", "direct", "--input-shape", "1x3x8x8",
                "--batch", "1", "-o", tmp_path / "cli"], env={"TRTFORGE_CACHE_DIR": str(cache)})
    # (in process, TensorRT's "logger differs" warning of an earlier network may precede it)
    (first, *rest) = [line for line in done.stderr.splitlines() if not line.startswith("warning: TensorRT")]
    assert done.returncode == 2 and not rest and first.startswith("error: "), done.stderr
    assert all(w in first for w in NMS_WORDS) and "--nms boxes-scores" in first and "--min-block-size 3" in first
    assert "postprocess=" not in first and not list(tmp_path.rglob("*.engine")) and not _stored(cache)


def _stored(cache) -> list:
    """What the engine cache holds besides its empty folders and request locks."""
    return [p for p in cache.rglob("*") if p.is_file() and p.parent.name != "locks"]


def test_partitioned_nms_runs_in_pytorch():
    """min_block_size: nms and the data-dependent indexing after it stay in PyTorch (the partition report says
    why); the convolution before it becomes the engine part; the whole equals the module (parts not built)."""
    model, x = nms_detector(), torch.randn(1, 3, 8, 8)
    module, report = partition(model, (x,), batch=1, min_block_size=1, build=False)
    assert len(report.engines) == 1 and "output size depends on the data" in report.pytorch["nms"], report.pytorch
    expected = model(x)
    assert 0 < len(expected) < 64  # nms kept some of the 64 anchors
    torch.testing.assert_close(module(x), expected, rtol=0, atol=0)


class RoiHead(torch.nn.Module):
    def __init__(self, scale: float, sampling_ratio: int, aligned: bool) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.args = (scale, 3, 2, sampling_ratio, aligned)

    def forward(self, x, rois):
        return torch.ops.torchvision.roi_align(self.conv(x), rois, *self.args)


def _inputs(batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``batch`` maps and ``batch`` rois (one per map, the last map's rois past the edges and under a pixel)."""
    g = torch.Generator().manual_seed(batch)
    xy = torch.rand(batch, 2, generator=g) * 40 - 6
    wh = torch.rand(batch, 2, generator=g) * 14
    wh[-1] = 0.3
    return torch.randn(batch, 3, 16, 12, generator=g), torch.cat([torch.arange(batch)[:, None], xy, xy + wh], 1)


def test_roi_align_reference_kernel():
    """The stand-in kernel on a ramp f(y, x) = x, worked by hand: aligned, 2 x 2 bins of 2 x 2 samples over
    [0, 4]² shift by half a pixel to x = 0, 1 | 2, 3 (bin means 0.5, 2.5)."""
    ramp = torch.arange(6.0).repeat(1, 1, 6, 1)
    out = roi_align_cpu(ramp, torch.tensor([[0, 0.0, 0, 4, 4]]), 1.0, 2, 2, 2, True)
    torch.testing.assert_close(out, torch.tensor([[[[0.5, 2.5], [0.5, 2.5]]]]))


@pytest.mark.parametrize(("scale", "sampling_ratio", "aligned", "precision", "build"),
                         [(0.5, 2, True, "fp32", True), (1.0, 3, False, "fp32", False), (0.5, 2, False, "fp16", False)])
def test_roi_align_converts(scale, sampling_ratio, aligned, precision, build):
    """Evaluated at 3 maps and 3 rois (exported over 1 to 4, so K is dynamic too) against the CPU kernel."""
    lowered = check(RoiHead(scale, sampling_ratio, aligned), _inputs, precision=precision, build=build)
    assert lowered.converted and "torchvision.roi_align.default" in lowered.converted.values()


def test_adaptive_sampling_refused():
    with pytest.raises(ConversionRefused, match=r"torchvision\.roi_align\.default .*refused: sampling_ratio=0: "
                                                r"an adaptive sample count"):
        check(RoiHead(1.0, 0, True), _inputs, build=False)
