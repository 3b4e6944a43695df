"""The non-finite guard: an FP16 graph whose outputs go NaN/inf where FP32's are finite is not built silently.

After the float pass, ONNX Runtime runs the processed graph and its FP32 reference on the example inputs. When an
output is non-finite where the reference's is finite, the guard finds where it starts: the nodes whose output goes
non-finite while their inputs are finite. Such a node computed in the low type stays FP32; one already FP32 (a
``Div`` of 0/0 after an ``Expand`` in FP16 flushed its epsilon to 0) keeps the low-type nodes that feed it in
FP32. The float pass plans again with those kept (its one rule set, the ``keep`` data the range probe also gives),
and the guard checks again; a graph still non-finite, or one with nothing left to keep, is refused with the node
named. ONNX Runtime computes some FP16 nodes in FP32 on the CPU, so this guard sees what goes non-finite there;
the range probe (``passes.range_probe``) covers magnitudes.

Example:
    >>> processed = finite_process(reference, "fp16", [{"pixel_values": x}], keep=probe_keep)
    >>> {n: r for n, r in processed.float_plan.fp32_nodes.items() if r.startswith("non-finite guard")}
    {'/attention/self/Expand': 'non-finite guard: ...'}
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import numpy as np
import onnx_ir as ir

from trtforge.core.errors import Unsupported, spelled
from trtforge.passes.graph import ort_session

log = logging.getLogger(__name__)

#: Plan, run and search again at most this many times (each round keeps every origin it finds).
MAX_ROUNDS = 4
CAST_PREFIX = "trtforge_cast_"


def _run(model: ir.Model, feeds: Mapping[str, np.ndarray], names: Sequence[str] = ()) -> dict[str, np.ndarray]:
    """The graph outputs (and ``names``) of ``model`` on ``feeds``, by name."""
    session = ort_session(model, extra_outputs=names, providers=["CPUExecutionProvider"])
    wanted = [o.name for o in session.get_outputs()]
    inputs = {i.name for i in session.get_inputs()}
    return dict(zip(wanted, session.run(wanted, {k: v for k, v in feeds.items() if k in inputs}), strict=True))


def _newly_nonfinite(reference: np.ndarray | None, actual: np.ndarray | None) -> int:
    """How many values of ``actual`` are NaN/inf where ``reference``'s are finite (0 when not comparable)."""
    if reference is None or actual is None:
        return 0
    ref, out = np.asarray(reference), np.asarray(actual)
    if ref.shape != out.shape or out.dtype.kind != "f" or ref.dtype.kind != "f":
        return 0
    return int(np.count_nonzero(~np.isfinite(out) & np.isfinite(ref)))


def nonfinite_outputs(reference: ir.Model, processed: ir.Model, feeds: Mapping[str, np.ndarray]) -> dict[str, int]:
    """``{output: count}`` of the processed graph's outputs that are NaN/inf where the reference's are finite."""
    expected, actual = _run(reference, feeds), _run(processed, feeds)
    counts = {name: _newly_nonfinite(expected.get(name), actual.get(name)) for name in actual}
    return {name: count for name, count in counts.items() if count}


def _low_producers(node: ir.Node, fp32_nodes: Mapping[str, str]) -> list[ir.Node]:
    """The nodes computed in the low type that feed ``node`` (through the float pass's Casts)."""
    found = []
    for value in node.inputs:
        producer = value.producer() if value is not None else None
        if producer is not None and producer.name.startswith(CAST_PREFIX) and producer.inputs[0] is not None:
            producer = producer.inputs[0].producer()
        if producer is not None and not producer.name.startswith(CAST_PREFIX) and producer.name not in fp32_nodes:
            found.append(producer)
    return found


def nonfinite_origins(reference: ir.Model, processed: ir.Model, fp32_nodes: Mapping[str, str],
                      feeds: Mapping[str, np.ndarray]) -> tuple[dict[str, str], list[str]]:
    """The nodes to keep in FP32 ({name: reason}) and the origins already FP32 with nothing left to keep.

    An origin is a node whose output is NaN/inf where the reference's is finite while its inputs are not.
    """
    names = [out.name for node in processed.graph for out in node.outputs
             if out.name and not node.name.startswith(CAST_PREFIX)]
    known = {out.name for node in reference.graph for out in node.outputs if out.name}
    expected = _run(reference, feeds, [n for n in map(_reference_name, names) if n in known])
    actual = _run(processed, feeds, names)

    def bad(value: ir.Value | None) -> int:
        if value is None:
            return 0
        return _newly_nonfinite(expected.get(_reference_name(value.name)), actual.get(value.name))

    def bad_input(value: ir.Value | None) -> bool:
        producer = value.producer() if value is not None else None
        if producer is not None and producer.name.startswith(CAST_PREFIX):
            value = producer.inputs[0]
        return bad(value) > 0

    keep, stuck = {}, []
    for node in processed.graph:
        if node.name.startswith(CAST_PREFIX):
            continue
        count = max((bad(out) for out in node.outputs), default=0)
        if not count or any(bad_input(v) for v in node.inputs):
            continue
        if node.name not in fp32_nodes:
            keep[node.name] = (f"non-finite guard: {node.op_type} gives {count} NaN/inf value(s) in the low type on "
                               "the example inputs, where FP32 gives finite ones")
            continue
        feeders = _low_producers(node, fp32_nodes)
        for feeder in feeders:
            keep.setdefault(feeder.name, f"non-finite guard: {feeder.op_type} feeds {node.op_type} {node.name!r} "
                                         f"(FP32), which gives {count} NaN/inf value(s) from its low-type result")
        if not feeders:
            stuck.append(node.name)
    return keep, stuck


def _reference_name(name: str) -> str:
    """The reference's name of a processed value: a graph output computed in the low type is renamed
    ``NAME_float16`` by the float pass (its FP32 Cast takes ``NAME``)."""
    for suffix in ("_float16", "_bfloat16"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def finite_process(reference: ir.Model, precision: str, feeds: Sequence[Mapping[str, np.ndarray]],
                   keep: Mapping[str, str] | None = None, keep_fp32: tuple[str, ...] = (), rounds: int = MAX_ROUNDS):
    """``passes.process`` for a float precision, with the nodes whose low type makes the outputs non-finite
    on ``feeds`` kept in FP32 (reasons in the plan); refused (``Unsupported``) with the node named when they
    cannot be. Without feeds, or where ONNX Runtime cannot run the graphs, the plain ``process``."""
    from trtforge.passes.process import process

    kept = dict(keep or {})
    processed = process(reference, precision, keep=kept or None, keep_fp32=keep_fp32)
    if not feeds:
        return processed
    for round_ in range(rounds + 1):
        try:
            bad = nonfinite_outputs(reference, processed.model, feeds[0])
            if not bad:
                return processed
            more, stuck = nonfinite_origins(reference, processed.model, processed.float_plan.fp32_nodes, feeds[0])
        except Exception as exc:  # noqa: BLE001 - ORT refuses some valid graphs (FP16 kernels it lacks)
            log.info("non-finite guard skipped: ONNX Runtime cannot run the %s graph (%s)", precision,
                     str(exc).strip().splitlines()[0][:200])
            return processed
        more = {name: reason for name, reason in more.items() if name not in kept}
        if not more or round_ == rounds:
            break
        kept.update(more)
        processed = process(reference, precision, keep=kept, keep_fp32=keep_fp32)
    raise _refusal(precision, bad, stuck, more, rounds)


def _refusal(precision: str, bad: Mapping[str, int], stuck: Sequence[str], more: Mapping[str, str],
             rounds: int) -> Unsupported:
    output, count = next(iter(bad.items()))
    if stuck:
        where = f"node {stuck[0]!r} gives NaN/inf in FP32 from inputs that are FP32 too"
    else:
        where = f"it stays so after {rounds} round(s) of FP32 islands (the next to keep: {next(iter(more))!r})"
    fix = spelled(cli=f"--keep-fp32 '{next(iter(more), stuck[0] if stuck else output)}'",
                  python=f"keep_fp32=[{next(iter(more), stuck[0] if stuck else output)!r}]")
    return Unsupported(f"{precision}: output {output!r} has {count} NaN/inf value(s) on the example inputs where "
                       f"FP32 has none; {where}; build bf16 (FP32's range) or fp32, or keep that part in FP32 "
                       f"with {fix}")


def example_feeds(model: ir.Model, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """One set of inputs for a graph given without example inputs: standard normal floats, integer and bool
    zeros, a dynamic batch of 1. Empty when another dim is not fixed (a sequence length, an image size).

    Example:
        >>> {k: v.shape for k, v in example_feeds(model)[0].items()}
        {'pixel_values': (1, 3, 24, 24)}
    """
    rng = np.random.default_rng(seed)
    feed = {}
    for value in model.graph.inputs:
        if value.is_initializer():
            continue
        dims = list(value.shape) if value.shape is not None else None
        if dims is None or value.dtype is None:
            return []
        if dims and not isinstance(dims[0], int):
            dims[0] = 1
        if not all(isinstance(d, int) and d >= 0 for d in dims):
            return []
        dtype = value.dtype.numpy()
        if np.issubdtype(dtype, np.floating):
            feed[value.name] = rng.standard_normal(dims).astype(dtype)
        elif np.issubdtype(dtype, np.integer) or dtype == np.bool_:
            feed[value.name] = np.zeros(dims, dtype)
        else:
            return []
    return [feed] if feed else []
