"""Per-sample metrics of a model's outputs against reference outputs (numpy), for error budgets and reports.

Example:
    >>> rel, cos = per_sample_errors([reference_logits], [int8_logits])
    >>> PER_SAMPLE["softmax_kl"]([reference_logits], [int8_logits]).mean()
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

Outputs = Sequence[np.ndarray]


def per_sample_errors(ref: list[np.ndarray], test: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Per-sample relative L2 and cosine over all outputs flattened together."""
    r = np.concatenate([o.reshape(o.shape[0], -1) for o in ref], axis=1).astype(np.float64)
    t = np.concatenate([o.reshape(o.shape[0], -1) for o in test], axis=1).astype(np.float64)
    rel = np.linalg.norm(t - r, axis=1) / np.maximum(np.linalg.norm(r, axis=1), 1e-12)
    cos = np.sum(r * t, axis=1) / np.maximum(np.linalg.norm(r, axis=1) * np.linalg.norm(t, axis=1), 1e-12)
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
