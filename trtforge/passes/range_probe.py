"""The range probe: run the FP32 reference on real inputs and keep in FP32 what would leave the low type's range.

ONNX Runtime runs the reference once per input set with every top-level float tensor as an output;
each tensor's largest finite magnitude is recorded. A node stays FP32 when one of its float inputs or
outputs reaches the low type's largest value divided by ``HEADROOM`` (inputs of other sizes and later
layers may reach further than the probe saw), or when it is a Softmax/LogSoftmax whose input reaches
``SOFTMAX_INPUT_BOUND`` (FP16 spacing there turns ``exp(x - max)`` into tens of percent of error).
The result is data for the float pass: ``{node name: reason}``, recorded in the sidecar. The thresholds and the
reasons are the FP32 rule set's (``core.fp32_rules``), which the direct path's probe (``convert.fp32_plan``) reads too.

Example:
    >>> ranges = measure_ranges(reference, [{"x": x}])
    >>> range_keep(reference, ranges, "float16")
    {'node_Div_3': 'Div: range probe: |x| reaches 1e+06, over 16376 (float16 max / 4)'}
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

import numpy as np
import onnx_ir as ir

from trtforge.core.fp32_rules import (
    SOFTMAX_OPS,
    range_reason,
    softmax_reason,
)
from trtforge.passes.graph import ort_session

log = logging.getLogger(__name__)



def _float_values(model: ir.Model) -> list[ir.Value]:
    return [out for node in model.graph for out in node.outputs
            if out.name and out.dtype == ir.DataType.FLOAT] + [
        v for v in model.graph.inputs if v.dtype == ir.DataType.FLOAT]


def measure_ranges(model: ir.Model, feeds: Iterable[Mapping[str, np.ndarray]]) -> dict[str, float]:
    """Largest finite |x| of every top-level float tensor of the FP32 ``model`` over ``feeds``.

    Example:
        >>> measure_ranges(model, [{"x": np.array([3.0, -5.0], np.float32)}])["x"]
        5.0
    """
    names = [v.name for v in _float_values(model)]
    if not names:
        return {}
    try:
        session = ort_session(model, extra_outputs=names, providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - ORT refuses some valid graphs (e.g. batchwise RNNs)
        log.warning("range probe skipped: ONNX Runtime cannot run the FP32 graph (%s); only the float pass's "
                    "own rules keep nodes in FP32", str(exc).strip().splitlines()[0][:200])
        return {}
    wanted = [o.name for o in session.get_outputs() if o.name in set(names)]
    inputs = {i.name for i in session.get_inputs()}
    ranges: dict[str, float] = {}
    for feed in feeds:
        outputs = session.run(wanted, {k: v for k, v in feed.items() if k in inputs})
        for name, array in zip(wanted, outputs, strict=True):
            array = np.asarray(array)
            if array.dtype.kind != "f" or array.size == 0:
                continue
            finite = np.abs(array[np.isfinite(array)])
            if finite.size:
                ranges[name] = max(ranges.get(name, 0.0), float(finite.max()))
    return ranges


def _node_reason(node: ir.Node, ranges: Mapping[str, float], dtype: str) -> str | None:
    """The FP32 rule set's range rules (``core.fp32_rules``) on what ``node`` reads and writes."""
    seen = [ranges[v.name] for v in [*node.inputs, *node.outputs] if v is not None and v.name in ranges]
    reason = range_reason(node.op_type, dtype, max(seen, default=0.0))
    if reason is None and node.op_type in SOFTMAX_OPS and node.inputs and node.inputs[0] is not None:
        reason = softmax_reason(node.op_type, dtype, ranges.get(node.inputs[0].name, 0.0))
    return reason


def range_keep(model: ir.Model, ranges: Mapping[str, float], dtype: str) -> dict[str, str]:
    """``{node name: reason}`` for the top-level nodes the probed ``ranges`` keep in FP32."""
    kept = {}
    for node in model.graph:
        reason = _node_reason(node, ranges, dtype)
        if reason:
            kept[node.name] = reason
    return kept


def probe(model: ir.Model, feeds: Iterable[Mapping[str, np.ndarray]], dtype: str) -> dict[str, str]:
    """``range_keep`` of ``measure_ranges``: what the float pass must keep in FP32 for these inputs."""
    return range_keep(model, measure_ranges(model, feeds), dtype)
