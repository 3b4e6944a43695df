"""The error budget of measured (auto) placement: defined in ``trtforge.core.budget`` (a config value).

Example:
    >>> from trtforge.quantize.budget import ErrorBudget
    >>> ErrorBudget.of(rel_l2=0.08).describe()
    'mean relative L2 ≤ 0.08'
"""

from trtforge.core.budget import (  # noqa: F401 - the old import path
    METRICS,
    TASK_BUDGETS,
    Z_ONE_SIDED_95,
    ErrorBudget,
    Limit,
    Metric,
    check_override,
    resolve_budget,
)
