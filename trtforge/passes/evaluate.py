"""Judge a processed graph against its FP32 reference in two evaluators.

ONNX Runtime's CPU provider computes many FP16 nodes in FP32 (it drops the casts even with its
optimisations off: an FP16 ``Add`` reads exactly 0.0 error there and 3e-4 in FP16 arithmetic), so
float-pass numerics are also judged by ``onnx.reference``, which computes each node in its
declared type (the *strict* evaluator).

Example:
    >>> float_errors(reference, processed, {"x": x})
    {'ort': 0.0, 'strict': 0.00031}
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx_ir as ir

from trtforge.passes.graph import ort_session, to_proto

#: The passes' rule: a transformation of the FP32 graph keeps its outputs within this relative error
#: (constant folding and equalization reorder sums).
FP32_TOLERANCE = 1e-5


def run_strict(model: ir.Model, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """The graph's outputs with each node computed in its declared type (``onnx.reference``)."""
    from onnx.reference import ReferenceEvaluator

    return [np.asarray(o) for o in ReferenceEvaluator(to_proto(model)).run(None, dict(feeds))]


def run_ort(model: ir.Model, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """The graph's outputs in ONNX Runtime on the CPU (one thread)."""
    return ort_session(model, providers=["CPUExecutionProvider"], threads=1).run(None, dict(feeds))


def relative_error(reference: np.ndarray, actual: np.ndarray) -> float:
    """max |a - r| / max(|r|, 1) over finite and non-finite values alike (inf where only one is finite).

    Example:
        >>> relative_error(np.array([100.0]), np.array([101.0]))
        0.01
    """
    ref = np.asarray(reference, np.float64)
    out = np.asarray(actual, np.float64)
    if ref.shape != out.shape:
        return float("inf")
    if ref.size == 0:
        return 0.0
    same = (ref == out) | (np.isnan(ref) & np.isnan(out))
    if not np.isfinite(out[~same]).all() or not np.isfinite(ref[~same]).all():
        return float("inf")
    diff = np.where(same, 0.0, np.abs(out - np.where(same, 0.0, ref)))
    return float((diff / np.maximum(np.abs(np.where(same, 0.0, ref)), 1.0)).max())


def float_errors(reference: ir.Model, processed: ir.Model, feeds: Mapping[str, np.ndarray]) -> dict[str, float]:
    """Worst relative error of ``processed`` against the FP32 ``reference`` (run in ORT), per evaluator."""
    expected = run_ort(reference, feeds)
    errors = {}
    for name, runner in (("ort", run_ort), ("strict", run_strict)):
        outputs = runner(processed, feeds)
        errors[name] = max((relative_error(r, o) for r, o in zip(expected, outputs, strict=True)), default=0.0)
    return errors
