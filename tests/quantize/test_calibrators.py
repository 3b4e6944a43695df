"""Calibrators against the issue's worked KL example and hand-computed histograms."""

from __future__ import annotations

import numpy as np
import pytest

from trtforge.quantize.calibrators import (
    calibrate,
    entropy_amax,
    entropy_threshold_bin,
    kl_divergence,
    mse_amax,
    percentile_amax,
    weight_scales,
)
from trtforge.quantize.observers import Histogram

EXAMPLE_1 = [1, 4, 10, 20, 20, 10, 3, 2]
EXAMPLE_2 = [1, 4, 10, 20, 20, 10, 15, 2]


@pytest.mark.parametrize(("counts", "kl_a", "kl_b"), [(EXAMPLE_1, 0.0637, 0.0380), (EXAMPLE_2, 0.1218, 0.0325)])
def test_kl_worked_example(counts, kl_a, kl_b):
    # A: all 8 bins, pairs merged; B: saturate at the bin 5/6 boundary, groups (0,1),(2,3),(4),(5).
    assert kl_divergence(counts, num_levels=4, stop=8) == pytest.approx(kl_a, abs=1e-3)
    assert kl_divergence(counts, num_levels=4, stop=6) == pytest.approx(kl_b, abs=1e-3)


def test_kl_worked_example_chooses_b_and_scale():
    stop = entropy_threshold_bin(EXAMPLE_1, num_levels=4, candidates=(8, 6), q_from="folded")
    assert stop == 6
    edges = np.arange(9, dtype=np.float64)  # bins of width 1 over [0, 8]
    scale = entropy_amax(EXAMPLE_1, edges, num_levels=4, candidates=(8, 6), q_from="folded") / 127
    assert scale == pytest.approx(6.0 / 127) and scale == pytest.approx(0.0472, abs=1e-4)


def test_kl_b_by_hand():
    # P' = [1,4,10,20,20,15] (tail 3+2 folded), Q = [2.5,2.5,15,15,20,15], both over 70.
    p = np.array([1, 4, 10, 20, 20, 15]) / 70
    q = np.array([2.5, 2.5, 15, 15, 20, 15]) / 70
    assert kl_divergence(EXAMPLE_1, 4, 6) == pytest.approx(float(np.sum(p * np.log(p / q))), rel=1e-12)


def test_kl_zero_bins_stay_zero():
    # Group (0,1) holds one non-zero bin: its whole mass goes there, so Q equals P and KL is 0.
    assert kl_divergence([0, 8, 0, 8], num_levels=2, stop=4) == pytest.approx(0.0, abs=1e-12)


def test_entropy_clips_a_long_tail():
    # Gaussian-like bulk plus a few far outliers: KL keeps the bulk and clips the tail.
    counts = np.zeros(2048)
    counts[:400] = np.exp(-np.linspace(0, 4, 400) ** 2 / 2) * 1e5
    counts[2040] = 1
    stop = entropy_threshold_bin(counts, num_levels=128)
    assert 300 < stop < 700


def test_max_calibrator():
    h = Histogram(num_bins=8)
    h.update(np.array([-3.5, 0.5, 1.0, 2.0]))
    assert calibrate(h, "max") == 3.5


def test_percentile_by_hand():
    counts = np.array([50, 30, 15, 4, 1, 0, 0, 0])
    edges = np.linspace(0, 8, 9)
    assert percentile_amax(counts, edges, 80) == 2.0  # cumsum 50, 80 → bin 1 → upper edge 2
    assert percentile_amax(counts, edges, 99) == 4.0  # 99 reached in bin 3
    assert percentile_amax(counts, edges, 100) == 5.0


def test_mse_by_hand():
    # Mass at |x| ≈ 0.5 plus one value at 100.5: clipping at 100+ leaves a step of ~0.8, which rounds
    # every 0.5 to 0 or 0.8 (error ~0.09 per value × 1000); clipping low costs 100² once.
    counts = np.zeros(101)
    counts[0] = 1000
    counts[100] = 1
    edges = np.arange(102, dtype=np.float64)
    amax = mse_amax(counts, edges)
    scale = amax / 127
    err = 1000 * (0.5 - np.clip(np.round(0.5 / scale), 0, 127) * scale) ** 2 + (
        100.5 - np.clip(np.round(100.5 / scale), 0, 127) * scale) ** 2
    for other in (1.0, 50.0, 101.0):
        s = other / 127
        e = 1000 * (0.5 - np.clip(np.round(0.5 / s), 0, 127) * s) ** 2 + (100.5 - np.clip(np.round(100.5 / s), 0, 127) * s) ** 2
        assert err <= e + 1e-9


def test_weight_scales_per_channel():
    w = np.array([[[[1.0, -2.0]]], [[[0.5, 0.25]]], [[[0.0, 0.0]]]])  # (3, 1, 1, 2)
    assert weight_scales(w, 0).tolist() == pytest.approx([2 / 127, 0.5 / 127, 1.0])
    assert weight_scales(w, None).tolist() == pytest.approx([2 / 127])


def test_histogram_streams_and_rebins():
    rng = np.random.default_rng(0)
    a, b = rng.normal(0, 1, 10000), rng.normal(0, 4, 10000)
    h = Histogram()
    h.update(a)
    first_range = h.range
    h.update(b)  # exceeds the range: old counts re-binned, nothing lost
    assert h.range >= np.abs(b).max() and h.range > first_range
    assert h.counts.sum() == 20000 and h.amax == pytest.approx(max(np.abs(a).max(), np.abs(b).max()))
    assert h.counts.size == 2048
    # The re-binned histogram agrees with a one-shot histogram over the same range.
    direct, _ = np.histogram(np.abs(np.concatenate([a, b])), bins=2048, range=(0, h.range))
    cdf_stream, cdf_direct = np.cumsum(h.counts), np.cumsum(direct)
    assert np.abs(cdf_stream - cdf_direct).max() <= 0.01 * 20000


def test_unknown_calibrator():
    with pytest.raises(ValueError, match="choose one of"):
        calibrate(Histogram(), "minmax")


def test_entropy_ignores_exact_zeros_of_relu():
    # A ReLU6 output: 90 % exact zeros, the rest spread over (0, 6]. Zeros quantize exactly at any
    # scale; counted in, they made the KL search clip at 128/2048 of the range (0.375).
    rng = np.random.default_rng(0)
    x = np.concatenate([np.zeros(900_000), rng.uniform(0, 6, 100_000)]).astype(np.float32)
    h = Histogram()
    h.update(x)
    assert h.zeros == 900_000
    assert calibrate(h, "entropy") > 5.0
