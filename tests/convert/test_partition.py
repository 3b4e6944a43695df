"""Partitioning and coverage: an op with no converter (a custom torch.library op, in
tests/doubles/custom_op_model.py) stays in PyTorch, the supported runs around it become engines, and the partitioned module matches PyTorch on the CPU
(engines through the reference evaluator)."""

from __future__ import annotations

import pytest
import torch
from custom_op_model import conv_jiggle_head, jiggle
from torch import nn

from trtforge.convert.converters import source_hash
from trtforge.convert.coverage import coverage
from trtforge.convert.partition import EngineModule, partition


def _inputs(b: int) -> tuple[torch.Tensor]:
    return (torch.randn(b, 3, 8, 8, generator=torch.Generator().manual_seed(b)),)


@pytest.mark.slow
def test_custom_op_stays_in_pytorch_and_the_rest_becomes_engines():
    model = conv_jiggle_head()
    module, report = partition(model, _inputs(2), batch=(1, 2, 4), min_block_size=2)
    engines = [m for m in module.modules() if isinstance(m, EngineModule)]
    assert len(engines) == 2 and len(report.engines) == 2
    assert all(e.plan for e in engines)  # each engine built with TensorRT-RTX
    for batch in (1, 3):
        torch.testing.assert_close(module(*_inputs(batch)), model(*_inputs(batch)), rtol=1e-4, atol=1e-5)
    code = module.code
    assert "jiggle" in code  # the custom op runs in PyTorch, between the engines
    [(node, why)] = report.pytorch.items()  # and the report says so (the build line counts it)
    assert "jiggle" in node and why == "no converter for trtforge_doubles.jiggle.default"


@pytest.mark.slow
def test_min_block_size_keeps_short_runs_in_pytorch():
    model = conv_jiggle_head()
    module, report = partition(model, _inputs(2), batch=(1, 2, 4), min_block_size=100, build=False)
    assert report.engines == {} and report.pytorch
    torch.testing.assert_close(module(*_inputs(3)), model(*_inputs(3)))


def test_coverage_reports_unsupported_refused_and_partitions():
    class Refusing(nn.Module):
        def forward(self, x):
            return jiggle(x).relu() + nn.functional.grid_sample(x, x[:, :2].permute(0, 2, 3, 1), mode="nearest",
                                                                align_corners=False)

    report = coverage(Refusing(), (torch.randn(2, 3, 5, 5),))
    assert report.unsupported == {"trtforge_doubles.jiggle.default": 1}
    [(node, reason)] = report.refused.items()
    assert node.startswith("aten.grid_sampler_2d.default") and "bilinear" in reason
    assert report.converted["aten.relu.default"] == 1 and 0 < report.fraction < 1
    assert "unsupported" in report.table() and "refused" in report.table()


def test_source_hash_is_stable_and_hex():
    assert source_hash() == source_hash() and len(source_hash()) == 64


def test_dynamic_batch_needs_an_example_batch_of_two():
    with pytest.raises(ValueError, match="batch ≥ 2"):
        partition(conv_jiggle_head(), _inputs(1), batch=(1, 2, 4))


def test_docs_converter_table_is_generated_from_the_registry():
    from pathlib import Path

    from trtforge.convert.converters import converter_table

    path = Path(__file__).resolve().parents[2] / "docs" / "converters.md"
    assert path.read_text() == converter_table(), "regenerate: python -m trtforge.convert.converters > docs/converters.md"
