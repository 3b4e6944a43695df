"""Observers: run the FP32 graph in ONNX Runtime and record, per tensor, |x|max and a histogram.

Histograms stream: each batch is added to 2048 bins over [0, range]; a batch whose |x|max
exceeds the range grows it (to the next power-of-two multiple) and re-bins the old counts, so
memory stays bounded whatever the number of samples. Non-finite values (NaN, ±inf: a mask's -inf, an
overflow in the FP32 graph itself) are counted apart and left out of the range; ``observe`` warns once,
naming the tensors. A range of subnormal floats (activations that vanish) bins as any other.

Example:
    >>> stats = observe(model, ["conv_in", "mm_in"], batches, per_channel=["ln_out"])
    >>> stats.histograms["conv_in"].amax
    5.73
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx
import onnx_ir as ir

from trtforge.passes.graph import ort_session

log = logging.getLogger(__name__)

NUM_BINS = 2048


class Histogram:
    """Streaming histogram of |x| with ``num_bins`` equal bins over ``[0, edges[-1]]``."""

    def __init__(self, num_bins: int = NUM_BINS) -> None:
        self.num_bins = num_bins
        self.counts = np.zeros(num_bins, dtype=np.int64)
        self.range = 0.0
        self.amax = 0.0
        self.zeros = 0  # exact zeros (post-ReLU): any scale represents them exactly
        self.nonfinite = 0  # NaN and ±inf values: counted, left out of the range and the counts
        self.seen = 0  # every value given, non-finite ones included

    @property
    def nonzero_counts(self) -> np.ndarray:
        counts = self.counts.copy()
        counts[0] -= self.zeros
        return counts

    @property
    def edges(self) -> np.ndarray:
        return np.linspace(0.0, self.range if self.range > 0 else 1.0, self.num_bins + 1)

    def _rebin(self, new_range: float) -> None:
        if self.range > 0 and self.counts.any():
            old_width = self.range / self.num_bins
            centres = (np.arange(self.num_bins) + 0.5) * old_width
            idx = np.minimum((centres / new_range * self.num_bins).astype(np.int64), self.num_bins - 1)
            counts = np.zeros_like(self.counts)
            np.add.at(counts, idx, self.counts)
            self.counts = counts
        self.range = new_range

    def update(self, values: np.ndarray) -> None:
        x = np.abs(np.asarray(values, dtype=np.float32).ravel())
        self.seen += x.size
        finite = np.isfinite(x)
        if not finite.all():
            self.nonfinite += int(x.size - np.count_nonzero(finite))
            x = x[finite]
        if x.size == 0:
            return
        self.zeros += int(np.count_nonzero(x == 0))
        batch_max = float(x.max())
        self.amax = max(self.amax, batch_max)
        if batch_max > self.range:
            new_range = batch_max if self.range == 0 else self.range
            while new_range < batch_max:
                new_range *= 2.0
            self._rebin(new_range)
        if self.range == 0:  # all zeros so far
            self.counts[0] += x.size
            return
        # x / range first: num_bins / range overflows FP32 when the range is subnormal (and 0 × inf is NaN).
        idx = np.minimum((x / np.float32(self.range) * np.float32(self.num_bins)).astype(np.int64), self.num_bins - 1)
        self.counts += np.bincount(idx, minlength=self.num_bins)

    def to_dict(self) -> dict:
        return {"range": self.range, "amax": self.amax, "zeros": self.zeros, "nonfinite": self.nonfinite,
                "counts": self.counts.tolist()}


def warn_nonfinite(histograms: dict[str, Histogram], shown: int = 5) -> None:
    """One warning naming the tensors whose observed values held NaN or ±inf (left out of their ranges)."""
    bad = [(name, h) for name, h in histograms.items() if h.nonfinite]
    if not bad:
        return
    named = ", ".join(f"{name!r} ({h.nonfinite} of {h.seen} values)" for name, h in bad[:shown])
    more = f" and {len(bad) - shown} more" if len(bad) > shown else ""
    log.warning("calibration: the FP32 model gives non-finite values (NaN/inf) in %s%s on the calibration data; "
                "they are left out of the quantization ranges (a mask's -inf is expected; otherwise check that the "
                "data is in the range the model expects)", named, more)


@dataclass
class ObservedStats:
    """Per-tensor histograms, per-channel |x|max (last axis) and observed shapes."""

    histograms: dict[str, Histogram] = field(default_factory=dict)
    channel_amax: dict[str, np.ndarray] = field(default_factory=dict)
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    samples: int = 0

    def record(self, values: dict[str, np.ndarray], per_channel: Sequence[str] = (), shapes_of: Sequence[str] = ()) -> None:
        """Add one batch's activations (``{tensor: array}``) to the histograms, channel |x|max and shapes."""
        for name, histogram in self.histograms.items():
            histogram.update(values[name])
        for name in per_channel:
            arr = np.abs(np.asarray(values[name], dtype=np.float32))
            amax = arr.reshape(-1, arr.shape[-1]).max(axis=0)
            prev = self.channel_amax.get(name)
            self.channel_amax[name] = amax if prev is None else np.maximum(prev, amax)
        for name in shapes_of:
            self.shapes.setdefault(name, tuple(int(d) for d in np.shape(values[name])))

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays this state keeps (histogram counts, channel |x|max): bounded by the tensors
        observed and ``num_bins``, not by the samples."""
        return sum(h.counts.nbytes for h in self.histograms.values()) + sum(
            a.nbytes for a in self.channel_amax.values())


def observe(
    model: ir.Model | onnx.ModelProto,
    tensors: Sequence[str],
    batches: Iterable[dict[str, np.ndarray]],
    per_channel: Sequence[str] = (),
    shapes_of: Sequence[str] = (),
    num_bins: int = NUM_BINS,
    progress=None,
    total: int | None = None,
) -> ObservedStats:
    """Run ``model`` on ``batches`` and record statistics of ``tensors`` (FP32 graph only)."""
    wanted = list(dict.fromkeys([*tensors, *per_channel, *shapes_of]))
    session = ort_session(model, extra_outputs=wanted)
    stats = ObservedStats(histograms={t: Histogram(num_bins) for t in tensors})
    task = progress.add_task("calibrating", total=total) if progress is not None else None
    for batch in batches:
        # The batch's activations die when ``record`` returns, before the next batch runs: one batch's
        # worth at a time, whatever the number of samples.
        stats.record(dict(zip(wanted, session.run(wanted, batch), strict=True)), per_channel, shapes_of)
        stats.samples += int(next(iter(batch.values())).shape[0])
        if task is not None:
            progress.advance(task)
    warn_nonfinite(stats.histograms)
    return stats
