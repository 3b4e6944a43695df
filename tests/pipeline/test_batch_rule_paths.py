"""Issue 36: one batch rule (``core.batch.resolve_batch``) on every path. The same module compiled through the
ONNX path and the direct path gets the same optimization profile in its sidecar, with ``batch=None`` (an
example of batch 2: ``1:2:2``) and with an explicit batch, on models nobody here wrote: tests/convert/
test_fp32_rules_both_paths.py (ViT, Swin and ConvNext from tiny configs; the two issue-36 acceptance tests were
merged there, one compile per path and model). Before issue 36 the direct path built ``2:2:2`` for ``batch=None``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import trtforge
from trtforge.core.batch import BatchProfile, own_batch, resolve_batch
from trtforge.core.config import CompileConfig

pytestmark = pytest.mark.needs_trt


def test_resolve_batch_is_the_asked_batch_else_one_to_the_examples():
    assert resolve_batch(CompileConfig(batch=4), {"x": np.zeros((2, 3))}) == (BatchProfile(4, 4, 4),)
    assert resolve_batch(CompileConfig(), {"x": np.zeros((2, 3))}) == (BatchProfile(1, 2, 2),)
    assert resolve_batch(CompileConfig(), [torch.zeros(3, 1), torch.zeros(3)]) == (BatchProfile(1, 3, 3),)
    assert resolve_batch(CompileConfig(), {"x": np.zeros((1, 3))}) is None  # the graph's own batch
    assert resolve_batch(CompileConfig(), {"x": np.zeros((2, 3)), "y": np.zeros((5, 3))}) is None
    assert resolve_batch(CompileConfig(), {"x": np.zeros((2, 3)), "y": np.zeros((5, 3))},
                         batched={"x"}) == (BatchProfile(1, 2, 2),)
    assert resolve_batch(CompileConfig(), None) is None
    assert own_batch([torch.zeros(3, 2)]) == (BatchProfile(3, 3, 3),) and own_batch([]) == (BatchProfile(1, 1, 1),)


class _PinnedBatch(torch.nn.Module):
    """``x + x.T``: dim 0 meets dim 1 (3), so torch.export cannot let it range over 1..3."""

    def forward(self, x):
        return x + x.T


@pytest.mark.slow
def test_a_module_whose_batch_cannot_range_builds_its_own_batch_with_one_warning(tmp_path, caplog):
    art = trtforge.compile(_PinnedBatch(), (torch.zeros(3, 3),), path="direct", precision="fp32", optimization_level=0,
                           output_dir=tmp_path, progress=False)
    assert art.sidecar.profiles[0]["x"] == {"min": [3, 3], "opt": [3, 3], "max": [3, 3]}
    assert [r.message for r in caplog.records if "torch.export fixes dim 0 at 3" in r.message]


def test_convert_module_takes_a_compile_config_and_the_one_batch_rule():
    from tiny_model import TinyNet

    from trtforge.convert import convert_module

    torch.manual_seed(0)
    model, example = TinyNet().eval(), (torch.zeros(2, 3, 16, 16),)
    plan, conversion = convert_module(model, example, CompileConfig(precision="fp32"), build=False)
    assert plan is None and [shape for _n, _d, shape in conversion.record.inputs] == [(-1, 3, 16, 16)]  # 1:2:2
    _, fixed = convert_module(model, example, CompileConfig(precision="fp32", batch=2), build=False)
    assert [shape for _n, _d, shape in fixed.record.inputs] == [(2, 3, 16, 16)]
