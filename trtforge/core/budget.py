"""The error budget of measured (auto) placement, in the task's own metric.

A budget is a tuple of limits on metrics of the INT8 outputs against the FP32 outputs, measured on the
held-back samples. Each task has a default (``TASK_BUDGETS``, data):

* classification: mean softmax KL(FP32‖INT8) ≤ 0.01 and top-1 agreement ≥ 0.95;
* embedding: mean cosine ≥ 0.99;
* other: mean relative L2 ≤ 0.1.

Auto placement accepts a plan only when every limit holds for the one-sided 95 % confidence bound
of the metric's mean (mean ∓ 1.645 standard errors over the samples it checks), not just for the
mean: the search stops right at the limit, and a bare mean on a few dozen samples would sit on
the wrong side of it on new data about half the time.

``error_budget=`` overrides it: a float is the limit of the task's first metric, stated the way that
metric is (KL ≤ b, cosine ≥ b, relative L2 ≤ b); an ``ErrorBudget`` replaces the whole budget.

Example:
    >>> budget = resolve_budget("embedding", None)
    >>> budget.describe()
    'mean cosine ≥ 0.99'
    >>> resolve_budget("classification", 0.005).describe()
    'mean softmax KL ≤ 0.005 and top-1 agreement ≥ 0.95'
    >>> ErrorBudget.of(rel_l2=0.08).holds({"rel_l2": 0.05})
    True
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from numbers import Real
from typing import TYPE_CHECKING

from trtforge.core.errors import InvalidArgument

if TYPE_CHECKING:
    import numpy as np


Outputs = Sequence["np.ndarray"]
#: One-sided 95 % normal quantile: auto placement checks mean ∓ Z · standard error against a limit.
Z_ONE_SIDED_95 = 1.645


@dataclass(frozen=True)
class Metric:
    """A metric of the INT8 outputs against the FP32 outputs, and which limits make sense for it."""

    name: str
    text: str
    op: str  # "<=" (an error) or ">=" (an agreement)
    low: float  # a limit must lie in (low, high]
    high: float
    example: float

    def per_sample(self, ref: Outputs, test: Outputs) -> np.ndarray:
        """The metric per sample (``trtforge.core.metrics``; numpy loads on the first measurement)."""
        from trtforge.core import metrics

        return metrics.PER_SAMPLE[self.name](ref, test)

    @property
    def sign(self) -> str:
        return "≤" if self.op == "<=" else "≥"

    def holds(self, measured: float, limit: float) -> bool:
        return measured <= limit if self.op == "<=" else measured >= limit


METRICS: dict[str, Metric] = {m.name: m for m in (
    Metric("softmax_kl", "mean softmax KL", "<=", 0.0, math.inf, 0.01),
    Metric("top1_agreement", "top-1 agreement", ">=", 0.0, 1.0, 0.95),
    # Cosine limits below 0.5 are refused: they are almost always a 1 − cosine given by mistake.
    Metric("cosine", "mean cosine", ">=", 0.5, 1.0, 0.99),
    Metric("rel_l2", "mean relative L2", "<=", 0.0, math.inf, 0.1),
)}


@dataclass(frozen=True)
class Limit:
    """One limit of a budget: ``metric`` op ``value`` (the op comes from the metric)."""

    metric: str
    value: float

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise InvalidArgument(f"unknown budget metric {self.metric!r}; choose one of {', '.join(METRICS)}")
        m = METRICS[self.metric]
        if isinstance(self.value, bool) or not isinstance(self.value, Real) or not math.isfinite(self.value) \
                or not m.low < self.value <= m.high:
            span = f"({m.low:g}, {m.high:g}]" if math.isfinite(m.high) else f"> {m.low:g}"
            hint = " (a cosine floor, not 1 − cosine)" if self.metric == "cosine" else ""
            raise InvalidArgument(f"error budget {m.text} {m.sign} {self.value!r} is not a usable limit: it must be a "
                             f"finite number {span}{hint}, e.g. {m.example}")
        object.__setattr__(self, "value", float(self.value))

    def describe(self) -> str:
        m = METRICS[self.metric]
        return f"{m.text} {m.sign} {self.value:g}"


@dataclass(frozen=True)
class ErrorBudget:
    """Limits that must all hold on the held-back samples; the first is the one a float overrides."""

    limits: tuple[Limit, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "limits", tuple(self.limits))
        if not self.limits or not all(isinstance(x, Limit) for x in self.limits):
            raise InvalidArgument("an ErrorBudget needs at least one Limit, e.g. ErrorBudget.of(cosine=0.99)")
        names = [x.metric for x in self.limits]
        if len(set(names)) != len(names):
            raise InvalidArgument(f"an ErrorBudget names each metric once, got {names}")

    @classmethod
    def of(cls, **limits: float) -> ErrorBudget:
        """``ErrorBudget.of(softmax_kl=0.01, top1_agreement=0.95)``; keyword order sets the first limit."""
        return cls(tuple(Limit(k, v) for k, v in limits.items()))

    def with_first(self, value: float) -> ErrorBudget:
        return replace(self, limits=(Limit(self.limits[0].metric, value), *self.limits[1:]))

    def measure(self, ref: Outputs, test: Outputs) -> dict[str, float]:
        """Each metric's mean over the samples."""
        import numpy as np

        return {x.metric: float(np.mean(METRICS[x.metric].per_sample(ref, test))) for x in self.limits}

    def bounds(self, ref: Outputs, test: Outputs) -> dict[str, float]:
        """Each metric's one-sided 95 % confidence bound on its mean, on the cautious side of its limit."""
        import numpy as np

        out = {}
        for x in self.limits:
            m = METRICS[x.metric]
            values = np.asarray(m.per_sample(ref, test), np.float64)
            sem = float(values.std(ddof=1) / math.sqrt(values.size)) if values.size > 1 else 0.0
            out[x.metric] = float(values.mean()) + (Z_ONE_SIDED_95 * sem if m.op == "<=" else -Z_ONE_SIDED_95 * sem)
        return out

    def holds(self, measured: dict[str, float]) -> bool:
        return all(METRICS[x.metric].holds(measured[x.metric], x.value) for x in self.limits)

    def describe(self) -> str:
        return " and ".join(x.describe() for x in self.limits)

    def record(self, measured: dict[str, float] | None = None, bounds: dict[str, float] | None = None) -> list[dict]:
        """JSON rows for the sidecar: metric, op, limit, and the measured mean (and bound) with ``holds``.

        ``holds`` is judged on the bound when one is given, else on the mean.
        """
        rows = []
        for x in self.limits:
            row = {"metric": x.metric, "op": METRICS[x.metric].op, "limit": x.value}
            if measured is not None:
                row["measured"] = measured[x.metric]
            if bounds is not None:
                row["bound_95"] = bounds[x.metric]
            judged = bounds if bounds is not None else measured
            if judged is not None:
                row["holds"] = METRICS[x.metric].holds(judged[x.metric], x.value)
            rows.append(row)
        return rows


#: task → default budget (the issue's acceptance limits for each kind of model).
TASK_BUDGETS: dict[str, ErrorBudget] = {
    "classification": ErrorBudget.of(softmax_kl=0.01, top1_agreement=0.95),
    "embedding": ErrorBudget.of(cosine=0.99),
    "other": ErrorBudget.of(rel_l2=0.1),
}


def check_override(value) -> None:
    """Refuse a malformed ``error_budget=`` before any work (task-dependent ranges: ``resolve_budget``)."""
    if value is None or isinstance(value, ErrorBudget):
        return
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value) or value <= 0:
        raise InvalidArgument(f"error_budget={value!r}: give a positive number, the limit in the task's metric "
                         "(classification: softmax KL, e.g. 0.01; embedding: mean cosine, e.g. 0.99; other: "
                         "relative L2, e.g. 0.1), an ErrorBudget, or None for the task's default")


def resolve_budget(task: str, override=None) -> ErrorBudget:
    """The budget for ``task``: its default, its first limit replaced by a float, or ``override`` itself."""
    if task not in TASK_BUDGETS:
        raise InvalidArgument(f"task={task!r} has no error budget; choose one of {', '.join(TASK_BUDGETS)}")
    check_override(override)
    if override is None:
        return TASK_BUDGETS[task]
    if isinstance(override, ErrorBudget):
        return override
    try:
        return TASK_BUDGETS[task].with_first(override)
    except ValueError as exc:
        raise InvalidArgument(f"error_budget={override!r} for a {task} model: {exc}") from exc
