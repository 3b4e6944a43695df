"""The pass sequence, written once: the FP32 reference graph, then the graph a precision builds from.

``reference_graph`` runs the cleanup (constant and BatchNorm folding, no-op removal) on a captured
graph; ``process`` turns that FP32 reference into the graph handed to TensorRT: itself for FP32,
the float pass for FP16/BF16, the float pass then a frozen ``QuantPlan``'s Q/DQ nodes for the
quantized precisions (INT8, FP8, weight-only INT8/INT4).
``trtforge.compile`` and ``trtforge.refit`` both go through these two functions. Neither changes
its input.

Example:
    >>> reference = reference_graph(load_ir(Path("m.onnx")))
    >>> processed = process(reference, "fp16")
    >>> processed.built_precision, len(processed.float_plan.fp32_nodes)
    ('fp16', 2)
    >>> process(fp32_model, "int8", plan).built_precision      # plan from trtforge.quantize
    'int8'
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass

import onnx
import onnx_ir as ir

from trtforge.core.config import FLOAT_OF_PRECISION, QUANTIZED_PRECISIONS
from trtforge.core.errors import InvalidArgument
from trtforge.passes.cleanup import cleanup
from trtforge.passes.float16 import (
    BF16_MIN_OPSET,
    FloatPlan,
    apply_float,
    infer_types,
    plan_float,
    raise_opset,
)
from trtforge.passes.graph import copy_model, ensure_node_names, ensure_opset, has_qdq, load_ir, proto_bytes
from trtforge.passes.keep import kept_by_patterns
from trtforge.passes.qdq import QuantPlan, apply_plan_in_place


@dataclass(frozen=True)
class Processed:
    """The graph a build hands to TensorRT, the precision it really builds, and the float pass's plan."""

    model: ir.Model
    built_precision: str
    float_plan: FloatPlan | None = None


def reference_graph(source: ir.Model | onnx.ModelProto) -> ir.Model:
    """The FP32 reference: ``source`` (an ir.Model is cleaned in place) after the cleanup passes.

    A ModelProto's reference is kept (serialized) for the process's next builds of the same graph: a precision
    sweep, ``build_matrix``, ``tune`` or the CLI matrix clean the same file once, not once per build (the cleanup
    is a third to a half of an ONNX build's time on PP-OCR). Each call gets its own ir.Model.
    """
    if not isinstance(source, onnx.ModelProto) or source.ByteSize() > _REFERENCES_BYTES // 2:
        return cleanup(load_ir(source))
    raw = proto_bytes(source)
    key = hashlib.sha256(raw).hexdigest()
    with _REFERENCES_LOCK:
        cleaned = _REFERENCES.get(key)
        if cleaned is not None:
            _REFERENCES.move_to_end(key)
    if cleaned is None:
        cleaned = proto_bytes(cleanup(load_ir(onnx.ModelProto.FromString(raw))))  # the caller's proto untouched
        with _REFERENCES_LOCK:
            _REFERENCES[key] = cleaned
            while sum(len(v) for v in _REFERENCES.values()) > _REFERENCES_BYTES:
                _REFERENCES.popitem(last=False)
    return load_ir(onnx.ModelProto.FromString(cleaned))  # as a later call gets it: the same graph either way


#: sha256 of a source graph → its cleaned reference (serialized), the most recent last; at most this many bytes.
_REFERENCES: OrderedDict[str, bytes] = OrderedDict()
_REFERENCES_LOCK = threading.Lock()
_REFERENCES_BYTES = 256 << 20


def quantized_graph(fp32: ir.Model, plan: QuantPlan) -> tuple[ir.Model, FloatPlan]:
    """The FP16 float pass on a copy of ``fp32``, then ``plan``'s Q/DQ nodes with FP16 scales; and the float
    pass's plan (the nodes it kept in FP32 and why: the sidecar records them, as for an FP16 build)."""
    fp16 = infer_types(copy_model(fp32))
    float_plan = plan_float(fp16, "float16")
    fp16 = apply_float(fp16, float_plan)
    return apply_plan_in_place(ensure_node_names(ensure_opset(fp16, plan.opset)), plan), float_plan


def process(reference: ir.Model, precision: str, plan: QuantPlan | None = None,
            keep: Mapping[str, str] | None = None, keep_fp32: tuple[str, ...] = ()) -> Processed:
    """The graph to build for ``precision`` from the FP32 ``reference`` (not modified).

    ``keep`` ({node: reason}) are nodes the float pass keeps in FP32 besides its own rules: the
    range probe's (``passes.range_probe.probe``), or at refit the build's recorded ones.
    ``keep_fp32``: name patterns of nodes the user keeps in FP32 (``passes.keep``).

    FP32 returns ``reference`` itself. A quantized precision needs the plan ``trtforge.quantize``
    computed on ``reference``; when that plan keeps every layer in FP16 the build is an FP16 one.
    """
    if precision not in FLOAT_OF_PRECISION:
        raise InvalidArgument(f"precision={precision!r}; choose one of {', '.join(FLOAT_OF_PRECISION)}")
    quantized = precision in QUANTIZED_PRECISIONS
    if (plan is None) == quantized:
        raise InvalidArgument(f"process() takes a QuantPlan for precision {', '.join(QUANTIZED_PRECISIONS)} and "
                              "only then; compute it with trtforge.quantize.quantize_model")
    if quantized and plan.precision != precision:
        raise InvalidArgument(f"process(precision={precision!r}) was given a plan for {plan.precision!r}; "
                              f"quantize with precision={precision!r}")
    if precision == "fp32":
        return Processed(reference, "fp32")
    if quantized:
        model, float_plan = quantized_graph(reference, plan)
        return Processed(model, precision if has_qdq(model) else "fp16", float_plan)
    model = copy_model(reference)
    if precision == "bf16":  # converted, not relabelled: every node keeps its meaning at opset 22
        model = raise_opset(model, BF16_MIN_OPSET)
    model = infer_types(model)
    kept = {**kept_by_patterns(model, keep_fp32), **(keep or {})}
    float_plan = plan_float(model, FLOAT_OF_PRECISION[precision], kept or None)
    return Processed(apply_float(model, float_plan), precision, float_plan)
