"""Per-sample metrics of a model's outputs against reference outputs (numpy), for error budgets and reports.

Example:
    >>> rel, cos = per_sample_errors([reference_logits], [int8_logits])
    >>> PER_SAMPLE["softmax_kl"]([reference_logits], [int8_logits]).mean()
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

Outputs = Sequence[np.ndarray]


def batch_rows(batch: Mapping[str, np.ndarray]) -> int | None:
    """The rows of one batch of inputs: the first input's dim 0 (None when every input is a scalar)."""
    return next((int(np.shape(a)[0]) for a in batch.values() if np.ndim(a)), None)


def carries_rows(runs: Sequence[np.ndarray], rows: Sequence[int | None]) -> bool:
    """Whether an output's dim 0 is the batch in every run (its rows are the inputs' rows)."""
    return all(np.ndim(r) and n is not None and np.shape(r)[0] == n for r, n in zip(runs, rows, strict=True))


def rows_per_run(runs: Sequence[np.ndarray]) -> np.ndarray:
    """One output over the runs as ``(runs, elements)``, each run flattened, a shorter run padded with zeros (zeros
    in both the reference and the candidate change no norm, dot product or difference the metrics take)."""
    width = max((np.size(r) for r in runs), default=0)
    joined = np.zeros((len(runs), width), dtype=np.result_type(*runs) if runs else np.float32)
    for row, run in zip(joined, runs, strict=True):
        row[: np.size(run)] = np.ravel(run)
    return joined


def join_runs(runs: Sequence[np.ndarray], rows: Sequence[int | None]) -> np.ndarray:
    """One output over several batch runs, one row per sample: concatenated along dim 0 where that is the batch
    (``rows``: each run's input rows), else one row per run (a transposed ``(classes, N)``, a ``(K,)``, a scalar).

    Example:
        >>> join_runs([np.ones((8, 4)), np.ones((8, 2))], [4, 2]).shape  # (classes, N): per run
        (2, 32)
    """
    return np.concatenate(runs, axis=0) if carries_rows(runs, rows) else rows_per_run(runs)


def _float64_blocks(ref: Outputs, test: Outputs, elements: int = 1 << 20):
    """Both output lists as (batch, columns) float64 blocks of about ``elements`` values each, output by output:
    the sums below never hold a float64 copy of a whole output (a 16 MiB activation would take 32 MiB, per
    operand and per temporary)."""
    for r, t in zip(ref, test, strict=True):
        r2, t2 = r.reshape(r.shape[0], -1), t.reshape(t.shape[0], -1)
        step = max(1, elements // max(1, r2.shape[0]))
        for start in range(0, r2.shape[1], step):
            yield r2[:, start:start + step].astype(np.float64), t2[:, start:start + step].astype(np.float64)


def per_sample_stats(ref: Outputs, test: Outputs) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-sample relative L2, cosine and largest absolute difference over all outputs flattened together,
    summed block by block (memory: a few MiB whatever the outputs' size)."""
    rows = ref[0].shape[0]
    rr, tt, rt, dd, worst = (np.zeros(rows) for _ in range(5))
    for r, t in _float64_blocks(ref, test):
        d = t - r
        rr += np.einsum("ij,ij->i", r, r)
        tt += np.einsum("ij,ij->i", t, t)
        rt += np.einsum("ij,ij->i", r, t)
        dd += np.einsum("ij,ij->i", d, d)
        if d.size:
            worst = np.maximum(worst, np.abs(d).max(axis=1))
    r_norm, t_norm = np.sqrt(rr), np.sqrt(tt)
    rel = np.sqrt(dd) / np.maximum(r_norm, 1e-12)
    cos = rt / np.maximum(r_norm * t_norm, 1e-12)
    return rel, cos, worst


def per_sample_errors(ref: Outputs, test: Outputs) -> tuple[np.ndarray, np.ndarray]:
    """Per-sample relative L2 and cosine over all outputs flattened together."""
    rel, cos, _ = per_sample_stats(ref, test)
    return rel, cos


def softmax(x: np.ndarray) -> np.ndarray:
    z = x - x.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def _kl(ref: Outputs, test: Outputs) -> np.ndarray:
    """Per-sample KL(softmax(FP32) ‖ softmax(INT8)) of the first output (batch, classes)."""
    p, q = softmax(ref[0].astype(np.float64)), softmax(test[0].astype(np.float64))
    return np.sum(p * (np.log(np.maximum(p, 1e-30)) - np.log(np.maximum(q, 1e-30))), axis=-1)


def _top1(ref: Outputs, test: Outputs) -> np.ndarray:
    return (ref[0].argmax(-1) == test[0].argmax(-1)).astype(np.float64)


def _cosine(ref: Outputs, test: Outputs) -> np.ndarray:
    return per_sample_errors(ref, test)[1]


def _rel_l2(ref: Outputs, test: Outputs) -> np.ndarray:
    return per_sample_errors(ref, test)[0]


#: Metric name (``trtforge.core.budget.METRICS``) → its per-sample function.
PER_SAMPLE: dict[str, Callable[[Outputs, Outputs], np.ndarray]] = {
    "softmax_kl": _kl, "top1_agreement": _top1, "cosine": _cosine, "rel_l2": _rel_l2,
}
