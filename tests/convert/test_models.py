"""Model tests for the direct path: each model converts with 100% coverage (nothing left in PyTorch),
matches PyTorch through the reference evaluator at a batch other than the export's, and builds with
TensorRT-RTX (full-model builds are marked slow)."""

from __future__ import annotations

import pytest
import torch
from blocks import GridSampleHead, SwinBlock, ViTBlock
from convert_check import check

from trtforge.convert.coverage import coverage


def _full_coverage(model, inputs):
    report = coverage(model, inputs)
    assert report.unsupported == {} and report.refused == {}, report.table()
    assert report.fraction == 1.0


@pytest.mark.slow
def test_vit_block():
    torch.manual_seed(0)
    model = ViTBlock().eval()
    make = lambda b: (torch.randn(b, 3, 32, 32),)  # noqa: E731
    _full_coverage(model, make(2))
    check(model, make)


@pytest.mark.slow
def test_swin_block():
    torch.manual_seed(0)
    model = SwinBlock().eval()
    make = lambda b: (torch.randn(b, 8, 8, 32),)  # noqa: E731
    _full_coverage(model, make(2))
    lowered = check(model, make)
    assert lowered.net.record.kinds().get("slice", 0) >= 2  # the two rolls are WRAP slices


@pytest.mark.slow
def test_grid_sample_head():
    torch.manual_seed(0)
    model = GridSampleHead().eval()
    check(model, lambda b: (torch.randn(b, 8, 10, 12), torch.randn(b, 5, 8)))


@pytest.mark.slow
def test_efficientnet_lite0(lite0):
    make = lambda b: (torch.randn(b, 3, 224, 224, generator=torch.Generator().manual_seed(b)),)  # noqa: E731
    _full_coverage(lite0, make(2))
    check(lite0, make, batch=(1, 2, 4), eval_batch=3)


@pytest.mark.slow
def test_efficientnet_lite0_fp16(lite0):
    make = lambda b: (torch.randn(b, 3, 224, 224, generator=torch.Generator().manual_seed(b)),)  # noqa: E731
    lowered = check(lite0, make, precision="fp16", build=False, batch=(1, 2, 2), eval_batch=2,
                    tolerance={"rtol": 5e-2, "atol": 5e-2})
    # the FP32 rule set (core.fp32_rules) keeps a mean only where it feeds a normalisation, as the ONNX float pass does
    assert not [name for name, why in lowered.fp32_nodes.items() if why.startswith("ReduceMean")]


def _tokens(b: int):
    generator = torch.Generator().manual_seed(b)
    ids = torch.randint(0, 30000, (b, 16), generator=generator)
    mask = torch.ones(b, 16, dtype=torch.int64)
    mask[-1, 9:] = 0  # one padded sentence
    return ids, mask


@pytest.mark.slow
def test_minilm_encoder():
    from trtforge.zoo import minilm_encoder

    model = minilm_encoder()
    # the real weights at one of the six encoder layers: every op kind of the model (21, attention, MLP, norms,
    # embeddings, masked pooling) in a fifth of the nodes, which is what torch.export's cost follows
    model.bert.encoder.layer = model.bert.encoder.layer[:1]
    _full_coverage(model, _tokens(2))
    check(model, _tokens, batch=(1, 2, 4), eval_batch=3)


@pytest.mark.slow
def test_detr_like():
    from trtforge.zoo.detr_like import detr_like

    # one decoder layer: self- and cross-attention, FFN and norms, the op kinds of two (checked) in 147 nodes, not 230
    model = detr_like(image_size=(128, 128), decoder_layers=1, num_queries=50)
    make = lambda b: (torch.randn(b, 3, 128, 128, generator=torch.Generator().manual_seed(b)),)  # noqa: E731
    _full_coverage(model, make(2))
    check(model, make, batch=(1, 2, 3), eval_batch=3, tolerance={"rtol": 1e-3, "atol": 1e-3})
