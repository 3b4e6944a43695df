"""``trtforge tune``: the fastest deployment that keeps the accuracy, measured on this device, recorded in the
artifact (its ``tuned`` sidecar record) and used by ``route="auto"``.

One module per part: ``candidates`` (what is swept, cheap first; what is skipped and why), ``subject`` (the model
and the data, checked against each other), ``measure`` (build through the engine cache, accuracy, timing),
``pareto`` (the front and the choice under constraints), ``store`` (the points a second run reuses), ``report``
(table, PNG, JSON, the ``tuned`` record), ``sweep`` (``tune``, the verb).

Example:
    >>> from trtforge.tuning import tune
    >>> report = tune("model.onnx", "data.npz", "tuned", routes=("onnxruntime",), max_minutes=1)
"""

from trtforge.tuning.candidates import TuneConfig
from trtforge.tuning.pareto import ConstraintUnmet, Point, pareto_front
from trtforge.tuning.report import TuneReport
from trtforge.tuning.sweep import tune

__all__ = ["ConstraintUnmet", "Point", "TuneConfig", "TuneReport", "pareto_front", "tune"]
