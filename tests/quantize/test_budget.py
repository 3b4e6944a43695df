"""The auto placement's error budget speaks the task's metric: the table, the overrides, the refusals
(before any calibration), the task detection, and a real auto placement on MiniLM whose cosine limit
is checked independently on the held-back sentences."""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest

from trtforge.core.budget import TASK_BUDGETS, ErrorBudget, Limit, resolve_budget
from trtforge.core.config import QuantConfig
from trtforge.passes.graph import ort_session
from trtforge.quantize.quantizer import quantize_model
from trtforge.quantize.task import detect_task


def test_budget_table_task_to_metric():
    assert {task: [(x.metric, x.value) for x in b.limits] for task, b in TASK_BUDGETS.items()} == {
        "classification": [("softmax_kl", 0.01), ("top1_agreement", 0.95)],
        "embedding": [("cosine", 0.99)],
        "other": [("rel_l2", 0.1)],
    }
    # A float overrides the first limit, in that metric's own terms; the others stay.
    assert resolve_budget("classification", 0.005).describe() == "mean softmax KL ≤ 0.005 and top-1 agreement ≥ 0.95"
    assert resolve_budget("embedding", 0.995).describe() == "mean cosine ≥ 0.995"
    assert resolve_budget("other", None) is TASK_BUDGETS["other"]
    own = ErrorBudget.of(rel_l2=0.08)
    assert resolve_budget("classification", own) is own


def test_budget_holds_by_direction():
    b = ErrorBudget.of(softmax_kl=0.01, top1_agreement=0.95)
    assert b.holds({"softmax_kl": 0.01, "top1_agreement": 0.95})
    assert not b.holds({"softmax_kl": 0.0101, "top1_agreement": 1.0})
    assert not b.holds({"softmax_kl": 0.0, "top1_agreement": 0.94})
    # The metrics themselves, on worked numbers: identical logits, then one flipped sample of two.
    ref = [np.array([[2.0, 0.0], [0.0, 2.0]], np.float32)]
    assert b.measure(ref, ref) == {"softmax_kl": 0.0, "top1_agreement": 1.0}
    flipped = [np.array([[2.0, 0.0], [2.0, 0.0]], np.float32)]
    m = b.measure(ref, flipped)
    p = np.exp([0.0, 2.0]) / np.exp([0.0, 2.0]).sum()
    assert m["top1_agreement"] == 0.5
    assert m["softmax_kl"] == pytest.approx(0.5 * float(np.sum(p * (np.log(p) - np.log(p[::-1])))))
    rows = b.record(m)
    assert rows[0] == {"metric": "softmax_kl", "op": "<=", "limit": 0.01, "measured": m["softmax_kl"], "holds": False}


@pytest.mark.parametrize("bad", [0, -0.1, math.nan, math.inf, True, "0.1"])
def test_invalid_error_budget_refused_by_config(bad):
    with pytest.raises(ValueError, match="error_budget="):
        QuantConfig(placement="auto", error_budget=bad)


def test_invalid_limits_name_the_fix():
    with pytest.raises(ValueError, match="cosine floor, not 1 − cosine"):
        QuantConfig(placement="auto", task="embedding", error_budget=0.01)
    with pytest.raises(ValueError, match=r"top-1 agreement ≥ 1.5 .* e.g. 0.95"):
        Limit("top1_agreement", 1.5)
    with pytest.raises(ValueError, match="unknown budget metric 'cos'"):
        ErrorBudget.of(cos=0.99)


@pytest.mark.slow  # the MiniLM encoder's ONNX export (session fixture)
def test_task_detection(lite0_onnx, minilm_onnx):
    assert detect_task(onnx.load(str(lite0_onnx))) == "classification"
    assert detect_task(onnx.load(str(minilm_onnx))) == "embedding"  # mean-pooled, then x / ‖x‖₂
    assert detect_task(onnx.load(str(minilm_onnx)), "other") == "other"


@pytest.mark.slow  # the MiniLM encoder's ONNX export (session fixture)
def test_budget_out_of_range_for_detected_task_fails_before_calibration(minilm_onnx):
    def calibration_data():
        raise AssertionError("calibration data was read before the budget was checked")

    # MiniLM is detected as an embedding model, whose budget is a cosine floor: 0.01 is refused.
    with pytest.raises(ValueError, match="embedding model.*cosine floor"):
        quantize_model(onnx.load(str(minilm_onnx)), calibration_data, QuantConfig(placement="auto", error_budget=0.01),
                       progress=False)


@pytest.mark.slow
def test_auto_placement_meets_cosine_budget_on_held_back_sentences(minilm, minilm_onnx, sentences):
    _, tokenize = minilm
    feeds = tokenize(sentences, seq_len=32)
    samples = [{k: v[i : i + 1].numpy() for k, v in feeds.items()} for i in range(len(sentences))]
    proto = onnx.load(str(minilm_onnx))
    config = QuantConfig(placement="auto", bias_correction=False, batch_size=4)
    result = quantize_model(proto, samples, config, progress=False)
    rep = result.report
    assert rep["task"] == "embedding"
    budget = rep["error_budget"]
    assert budget["source"] == "default" and budget["used_by_placement"]
    assert [(x["metric"], x["op"], x["limit"]) for x in budget["limits"]] == [("cosine", ">=", 0.99)]
    # Independently: ORT on the FP32 graph and on the simulated INT8 graph, the held-back sentences only.
    held = samples[-rep["samples"]["held_back"] :]
    batch = {k: np.concatenate([s[k] for s in held]) for k in held[0]}
    ref = ort_session(proto).run(None, batch)[0].astype(np.float64)
    test = ort_session(result.sim_model).run(None, batch)[0].astype(np.float64)
    cosine = np.sum(ref * test, axis=1) / (np.linalg.norm(ref, axis=1) * np.linalg.norm(test, axis=1))
    assert cosine.mean() >= 0.99
    assert budget["holds"] and budget["limits"][0]["measured"] == pytest.approx(cosine.mean(), abs=1e-4)
    assert rep["auto_placement"]["budget_at_placement"][0]["holds"]
    # The budget did work: groups kept in FP16 mean all-INT8 missed it (the search starts there and
    # re-admission only moves groups back to INT8), yet most MACs stay INT8.
    assert any(r["fp16"] for r in rep["sensitivity"])
    assert 0.3 < rep["coverage"] < 1.0
