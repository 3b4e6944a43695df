"""How far a candidate's outputs may stray from the reference's, by precision and task; and the judgement.

The task picks the metric that decides (``TASK_METRIC``): a classifier's top-1 agreement, an
embedding's mean cosine, otherwise the mean relative L2. Every output also gets its relative L2,
max abs error and cosine, for the table. Per-sample metrics come from ``trtforge.core.metrics``.

Example:
    >>> result = judge({"logits": ref}, {"logits": test}, task="classification", precision="fp16")
    >>> result.passed, result.outputs[0].top1
    (True, 1.0)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass

import numpy as np

from trtforge.core.errors import InvalidArgument
from trtforge.core.metrics import PER_SAMPLE
from trtforge.core.precisions import RECORDS

#: precision → metric → limit: each precision record's tolerance (``core.precisions``, where the reasons are).
TOLERANCES: dict[str, dict[str, float]] = {p.name: asdict(p.tolerance) for p in RECORDS}
#: task → the metric that decides. Its direction: ``rel_l2`` ≤ limit, the others ≥ limit.
TASK_METRIC: dict[str, str] = {"classification": "top1_agreement", "embedding": "cosine", "other": "rel_l2"}


@dataclass(frozen=True)
class OutputMetrics:
    """One output: mean relative L2, max abs error, mean cosine, and top-1 agreement (classifiers)."""

    name: str
    rel_l2: float
    max_abs: float
    cosine: float
    top1: float | None = None
    #: NaN/inf values of the candidate where the reference's are finite, the samples holding them, and the
    #: reference's own NaN/inf values.
    nonfinite: int = 0
    nonfinite_samples: int = 0
    reference_nonfinite: int = 0

    def nonfinite_line(self) -> str | None:
        """``output 'logits' has 12 NaN/inf values in 4 samples; FP32 has none``, or None when it has none."""
        if not self.nonfinite:
            return None
        fp32 = self.reference_nonfinite or "none"
        return (f"output {self.name!r} has {self.nonfinite} NaN/inf value(s) in {self.nonfinite_samples} "
                f"sample(s); FP32 has {fp32}")

    def value(self, metric: str) -> float | None:
        return {"rel_l2": self.rel_l2, "cosine": self.cosine, "top1_agreement": self.top1}[metric]


@dataclass(frozen=True)
class Judgement:
    """Every output's metrics, the deciding metric and its limit, and whether all outputs pass."""

    outputs: tuple[OutputMetrics, ...]
    metric: str
    limit: float
    precision: str
    task: str
    failures: tuple[str, ...]

    @property
    def passed(self) -> bool:
        return not self.failures


def limit_for(precision: str, metric: str) -> float:
    if precision not in TOLERANCES:
        raise InvalidArgument(f"precision {precision!r} has no tolerances; choose one of {', '.join(TOLERANCES)}")
    return TOLERANCES[precision][metric]


def output_metrics(name: str, ref: np.ndarray, test: np.ndarray, classification: bool = False) -> OutputMetrics:
    """The metrics of one output (sample axis first) against its reference."""
    ref = np.asarray(ref, dtype=np.float64)
    test = np.asarray(test, dtype=np.float64)
    if ref.shape != test.shape:
        raise InvalidArgument(f"output {name!r}: shapes differ, reference {ref.shape} vs candidate {test.shape}; "
                              "compare models with the same outputs")
    if ref.ndim == 0:
        ref, test = ref.reshape(1, 1), test.reshape(1, 1)
    top1 = float(PER_SAMPLE["top1_agreement"]([ref], [test]).mean()) if classification and ref.ndim == 2 else None
    new_nonfinite = ~np.isfinite(test) & np.isfinite(ref)
    return OutputMetrics(
        name, rel_l2=float(PER_SAMPLE["rel_l2"]([ref], [test]).mean()),
        max_abs=float(np.max(np.abs(ref - test))) if ref.size else 0.0,
        cosine=float(PER_SAMPLE["cosine"]([ref], [test]).mean()), top1=top1,
        nonfinite=int(np.count_nonzero(new_nonfinite)),
        nonfinite_samples=int(np.count_nonzero(new_nonfinite.reshape(len(ref), -1).any(axis=1))) if ref.size else 0,
        reference_nonfinite=int(np.count_nonzero(~np.isfinite(ref))),
    )


def judge(reference: Mapping[str, np.ndarray], candidate: Mapping[str, np.ndarray], task: str = "other",
          precision: str = "fp32", limit: float | None = None) -> Judgement:
    """Compare every reference output with the candidate's (by name) and judge the task's metric.

    ``limit`` overrides the precision's tolerance of that metric.
    """
    missing = [n for n in reference if n not in candidate]
    if missing:
        raise InvalidArgument(f"the candidate has no output(s) {missing}; its outputs are {sorted(candidate)}")
    metric = TASK_METRIC.get(task, "rel_l2")
    bound = limit if limit is not None else limit_for(precision, metric)
    rows, failures = [], []
    for index, (name, ref) in enumerate(reference.items()):
        row = output_metrics(name, ref, candidate[name], classification=task == "classification" and index == 0)
        rows.append(row)
        value = row.value(metric)
        if value is None:  # top-1 on an output that is not the class scores: judge its relative L2
            value, row_metric, row_bound = row.rel_l2, "rel_l2", limit_for(precision, "rel_l2")
        else:
            row_metric, row_bound = metric, bound
        ok = value <= row_bound if row_metric == "rel_l2" else value >= row_bound
        if row.nonfinite:  # named as such: "top1_agreement 0" would hide the NaNs behind a metric
            failures.append(row.nonfinite_line())
        elif not ok or not np.isfinite(value):
            sign = "≤" if row_metric == "rel_l2" else "≥"
            failures.append(f"{name}: {row_metric} {value:.4g}, needs {sign} {row_bound:g}")
    return Judgement(tuple(rows), metric, bound, precision, task, tuple(failures))
