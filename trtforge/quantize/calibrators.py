"""Activation calibrators: turn a histogram of |x| into a clipping threshold (amax).

All calibrators read the same streaming histogram (``observers.Histogram``): ``counts`` over
equal-width bins of |x| from 0 to ``edges[-1]``. The scale is ``amax / qmax`` of the quantized dtype:
127 for INT8, 448 for FP8 (E4M3).

* ``max``: the largest |x| seen.
* ``percentile``: the upper edge of the bin where the cumulative count reaches p % (99.99).
* ``entropy``: TensorRT's KL method (see ``kl_divergence``), 128 levels over 2048 bins.
* ``mse``: the threshold that minimises the quantisation MSE over the histogram, on the dtype's own
  grid (integers for INT8, E4M3's floats for FP8).

Example:
    >>> kl_divergence([1, 4, 10, 20, 20, 10, 3, 2], num_levels=4, stop=6)   # 0.0380…
    >>> amax = calibrate(hist, "entropy")
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from trtforge.core.config import CALIBRATORS
from trtforge.core.errors import InvalidArgument
from trtforge.passes.qdq import QUANT_DTYPES, QuantDtype, quantize_values

INT8_MAX = 127
INT8 = QUANT_DTYPES["int8"]


def kl_divergence(counts: Sequence[float], num_levels: int, stop: int, q_from: str = "folded") -> float:
    """KL(P‖Q) in nats for keeping bins ``[0, stop)`` of ``counts`` with ``num_levels`` levels.

    P is the kept bins with the clipped tail (bins ≥ ``stop``) folded into the last kept bin.
    Q merges bins into ``num_levels`` groups (``np.array_split``) and expands each group's
    total evenly over its non-zero bins of the original histogram; zero bins stay zero.
    ``q_from="folded"`` merges P itself (the issue's worked example); ``q_from="clipped"``
    merges the kept bins *without* the tail, as TensorRT's reference does. The search
    (``entropy_threshold_bin``) uses "clipped": with "folded", keeping exactly ``num_levels``
    bins always gives KL = 0, so the minimum would always clip at the first candidate.

    Example:
        >>> round(kl_divergence([1, 4, 10, 20, 20, 10, 3, 2], 4, 8), 4)
        0.0637
        >>> round(kl_divergence([1, 4, 10, 20, 20, 10, 3, 2], 4, 6), 4)
        0.038
    """
    hist = np.asarray(counts, dtype=np.float64)
    if not num_levels <= stop <= hist.size:
        raise InvalidArgument(f"stop={stop} must lie in [num_levels={num_levels}, bins={hist.size}]")
    if q_from not in ("folded", "clipped"):
        raise InvalidArgument(f"q_from={q_from!r}: use 'folded' or 'clipped'")
    kept = hist[:stop]
    p = kept.copy()
    p[-1] += hist[stop:].sum()
    nonzero = (hist[:stop] != 0).astype(np.float64)
    # array_split: the first (stop % levels) groups hold one bin more.
    sizes = np.full(num_levels, stop // num_levels)
    sizes[: stop % num_levels] += 1
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    group_sum = np.add.reduceat(p if q_from == "folded" else kept, starts)
    group_nz = np.add.reduceat(nonzero, starts)
    per_bin = np.divide(group_sum, group_nz, out=np.zeros_like(group_sum), where=group_nz > 0)
    q = np.repeat(per_bin, sizes) * nonzero
    total_p, total_q = p.sum(), q.sum()
    if total_p == 0 or total_q == 0:
        return 0.0
    p /= total_p
    q /= total_q
    mask = p > 0
    # Q can only be zero where the whole group is zero in the original histogram but the folded
    # tail made P non-zero in the last bin; TensorRT smooths such bins with a tiny epsilon.
    q_safe = np.where(q[mask] > 0, q[mask], 1e-12)
    return float(np.sum(p[mask] * np.log(p[mask] / q_safe)))


def entropy_threshold_bin(
    counts: Sequence[float], num_levels: int = 128, candidates: Sequence[int] | None = None,
    q_from: str = "clipped",
) -> int:
    """The ``stop`` bin with the smallest KL; candidates default to ``num_levels .. len(counts)``.

    Example:
        >>> entropy_threshold_bin([1, 4, 10, 20, 20, 10, 3, 2], 4, candidates=(8, 6), q_from="folded")
        6
    """
    hist = np.asarray(counts, dtype=np.float64)
    nonzero = np.nonzero(hist)[0]
    if nonzero.size == 0:
        return hist.size
    last = int(nonzero[-1]) + 1
    if candidates is None:
        if last <= num_levels:  # everything fits in the levels: no clipping needed
            return max(last, 1)
        candidates = range(num_levels, hist.size + 1)
    best_stop, best_kl = None, np.inf
    for stop in candidates:
        kl = kl_divergence(hist, num_levels, int(stop), q_from)
        if kl < best_kl - 1e-12:
            best_stop, best_kl = int(stop), kl
    return int(best_stop if best_stop is not None else hist.size)


def entropy_amax(
    counts: Sequence[float], edges: Sequence[float], num_levels: int = 128,
    candidates: Sequence[int] | None = None, q_from: str = "clipped",
) -> float:
    """The KL-optimal threshold: the upper edge of the chosen ``stop`` bin.

    Example:
        >>> entropy_amax([1, 4, 10, 20, 20, 10, 3, 2], range(9), 4, candidates=(8, 6), q_from="folded") / 127
        0.047244…   # 6.0 / 127
    """
    return float(np.asarray(edges, dtype=np.float64)[entropy_threshold_bin(counts, num_levels, candidates, q_from)])


def percentile_amax(counts: np.ndarray, edges: np.ndarray, percentile: float = 99.99) -> float:
    """Upper edge of the first bin where the cumulative share of |x| reaches ``percentile``."""
    if not 0 < percentile <= 100:
        raise InvalidArgument(f"percentile={percentile} must lie in (0, 100]; the usual value is 99.99")
    cdf = np.cumsum(counts, dtype=np.float64)
    if cdf[-1] == 0:
        return 0.0
    idx = int(np.searchsorted(cdf, cdf[-1] * percentile / 100.0, side="left"))
    return float(edges[min(idx + 1, len(edges) - 1)])


def mse_amax(counts: np.ndarray, edges: np.ndarray, num_candidates: int = 256, qtype: QuantDtype = INT8) -> float:
    """The threshold among bin edges that minimises Σ count·(x − Q(x))² at bin centres (``qtype``'s grid)."""
    counts = np.asarray(counts, dtype=np.float64)
    centres = (edges[:-1] + edges[1:]) / 2
    nz = np.nonzero(counts)[0]
    if nz.size == 0:
        return 0.0
    last = int(nz[-1]) + 1
    stops = np.unique(np.linspace(1, last, num=min(num_candidates, last)).round().astype(int))
    best, best_err = float(edges[last]), np.inf
    for stop in stops:
        amax = float(edges[stop])
        scale = amax / qtype.qmax
        if np.float32(scale) == 0:  # subnormal activations: the scale underflows FP32 (fp16_scales clamps it later)
            continue
        if qtype.integer:
            q = np.clip(np.round(centres / scale), 0, qtype.qmax) * scale
        else:
            q = quantize_values(centres, np.float32(scale), qtype).astype(np.float64) * scale
        err = float(np.sum(counts * (centres - q) ** 2))
        if err < best_err - 1e-18:
            best, best_err = amax, err
    return best


def calibrate(hist, method: str, percentile: float = 99.99, num_levels: int = 128, qtype: QuantDtype = INT8) -> float:
    """amax for one tensor's histogram (an ``observers.Histogram``) with ``method`` (``qtype``: mse's grid)."""
    if method == "max":
        return float(hist.amax)
    if method == "percentile":
        return min(percentile_amax(hist.counts, hist.edges, percentile), float(hist.amax))
    if method == "entropy":
        # Exact zeros (most of a post-ReLU tensor) quantize exactly at any scale; left in, they
        # dominate P and push the threshold to the first candidate.
        return min(entropy_amax(getattr(hist, "nonzero_counts", hist.counts), hist.edges, num_levels),
                   float(hist.amax))
    if method == "mse":
        return min(mse_amax(hist.counts, hist.edges, qtype=qtype), float(hist.amax))
    raise InvalidArgument(f"unknown calibrator {method!r}; choose one of {', '.join(CALIBRATORS)}")


def weight_scales(weight: np.ndarray, axis: int | None, qmax: float = INT8_MAX) -> np.ndarray:
    """Symmetric absmax scales (``amax / qmax``): per output channel along ``axis``, or per tensor (None)."""
    w = np.abs(np.asarray(weight, dtype=np.float32))
    if axis is None:
        amax = np.array([w.max() if w.size else 0.0], dtype=np.float32)
    else:
        amax = np.moveaxis(w, axis, 0).reshape(w.shape[axis], -1).max(axis=1)
    scales = amax / qmax
    return np.where(scales > 0, scales, 1.0).astype(np.float32)


def block_scales(weight: np.ndarray, axis: int, block_size: int, qmax: float) -> np.ndarray:
    """Symmetric absmax scales of a 2-D weight in blocks of ``block_size`` along ``axis`` (which it divides):
    the weight's shape with ``axis`` divided by ``block_size``.

    Example:
        >>> block_scales(np.arange(8.0).reshape(4, 2), axis=0, block_size=2, qmax=7.0) * 7
        array([[2., 3.], [6., 7.]])
    """
    w = np.abs(np.asarray(weight, dtype=np.float32))
    moved = np.moveaxis(w, axis, 0)
    amax = moved.reshape(moved.shape[0] // block_size, block_size, *moved.shape[1:]).max(axis=1)
    scales = np.moveaxis(amax, 0, axis) / qmax
    return np.where(scales > 0, scales, 1.0).astype(np.float32)
