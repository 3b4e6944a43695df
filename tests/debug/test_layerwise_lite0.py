"""Layer-wise divergence of EfficientNet-Lite0 INT8, against the sensitivity ranking INT8 placement computes.

Issue 11: layer-wise divergence on Lite0 must name a plausible first layer, compared with the ranking.
Both methods run on real photo crops in ONNX Runtime (INT8 simulated with FP32 scales). What they
agree on, measured (docs/benchmarks.md, "Precision bisection and layer-wise divergence"): the linear
bottleneck projections (`_blocks.N._project_conv`, no activation after them to absorb the error) are
where INT8 hurts; where they differ: the ranking also puts the first layers high (their own error is
small, but every later layer carries it), which per-layer error alone does not show.
"""

from __future__ import annotations

import pytest

from trtforge.core.config import QuantConfig
from trtforge.core.specs import TensorSpec
from trtforge.debug.bisect import Int8Search
from trtforge.debug.layerwise import layerwise
from trtforge.measure.inputs import make_inputs
from trtforge.passes.graph import QDQ_OPSET, ensure_node_names, ensure_opset, load_ir, save_model
from trtforge.passes.process import process
from trtforge.quantize.sensitivity import rank_groups
from trtforge.zoo.efficientnet_lite import LITE0_PREPROCESSING

pytestmark = pytest.mark.slow  # INT8 calibration and layer-wise runs of EfficientNet-Lite0

SPEC = (TensorSpec("images", "float32", (-1, 3, 224, 224)),)
PROJECTION = "_project_conv"


@pytest.fixture(scope="module")
def int8_lite0(lite0_onnx, tmp_path_factory):
    """(layer-wise report of every-layer INT8 Lite0, the sensitivity ranking of its layers, labels of all convs)."""
    model = ensure_node_names(ensure_opset(load_ir(lite0_onnx), QDQ_OPSET))
    calib = make_inputs(SPEC, (), 32, LITE0_PREPROCESSING, seed=0)
    search = Int8Search(model, calib, QuantConfig(bias_correction=False), None)
    rows = rank_groups(model, search.full, search.analysis, search.data.held_batches)
    ranking = [search.labels[o] for o in dict.fromkeys(o for row in rows for o in row["layers"])]
    path = tmp_path_factory.mktemp("lite0_int8") / "lite0_int8.onnx"
    save_model(process(model, "int8", search.full).model, path)
    report = layerwise(lite0_onnx, path, make_inputs(SPEC, (), 8, LITE0_PREPROCESSING, seed=3))
    return report, ranking


def test_layerwise_names_a_linear_bottleneck_that_the_ranking_also_rates_sensitive(int8_lite0):
    report, ranking = int8_lite0
    assert report.precision == "int8"
    first = report.first
    assert first is not None and first.rel_l2 > report.threshold
    assert first.label.endswith(PROJECTION), first.label
    # The ranking orders every quantized layer by the damage of quantizing it alone; the first
    # layer past the threshold sits in its more sensitive half.
    assert first.label in ranking and ranking.index(first.label) < len(ranking) // 2, (first.label, ranking)
    later = [row.rel_l2 for row in report.layers if row.index > first.index]
    assert max(later) > first.rel_l2  # the error keeps growing after it


def test_both_methods_point_at_the_projections(int8_lite0):
    report, ranking = int8_lite0
    base_rate = sum(label.endswith(PROJECTION) for label in ranking) / len(ranking)
    assert 0.2 < base_rate < 0.45  # 16 of Lite0's ~50 quantized layers are projections
    added = [row.label for row in report.most_added(8) if row.label in ranking]
    assert len(added) >= 6 and all(label.endswith(PROJECTION) for label in added), added
    top = ranking[:10]
    assert sum(label.endswith(PROJECTION) for label in top) / len(top) > 1.5 * base_rate, top
    # Where they differ: the ranking puts the stem or block 0 in its top three, which layer-wise
    # error per layer does not single out (their own error is small).
    assert any(label == "_conv_stem" or label.startswith("_blocks.0.") for label in ranking[:3]), ranking[:3]
    early = [row for row in report.layers if row.label == "_conv_stem"]
    assert early and early[0].rel_l2 < report.threshold
