"""Precision bisection: the fewest layers to keep in higher precision so that a metric meets its target.

Polygraphy's ``debug precision`` approach, on trtforge's own graphs in ONNX Runtime: order the
layers, then bisect for the shortest prefix of that order whose layers, kept in higher precision,
bring the metric to its target; then try each kept layer back (least harmful first) and leave it
out when the target still holds. Two orders are searched and the smaller set wins:

- ``graph``: the layers in graph order (Polygraphy's);
- ``sensitivity`` (INT8): the ranking the quantizer's placement computes (``quantize.sensitivity.rank_groups``:
  each layer alone in INT8, most harmful first).

INT8 keeps layers in FP16: the plan is exactly what ``trtforge build --precision int8 --include '.*'
--exclude PATTERN ...`` computes (``placement.decide``), simulated with FP32 scales. The search runs
on one set of samples, against the one-sided 95 % confidence bound of the metric (as INT8 auto
placement does), and the result is measured again on held-out samples.

Example:
    >>> result = bisect_int8(fp32, search, held_out, "top1_agreement", 0.95, calibration)
    >>> result.kept, result.held_out_value
    (('/_blocks.1/_depthwise_conv/Conv', '/_conv_stem/Conv'), 0.961)
    >>> result.build_flags
    "--precision int8 --include '.*' --exclude '^/_blocks\\.1/_depthwise_conv/Conv$' ..."
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx_ir as ir

from trtforge.core.budget import METRICS, ErrorBudget
from trtforge.core.config import FLOAT_OF_PRECISION, REDUCED_PRECISIONS, QuantConfig
from trtforge.core.errors import InvalidArgument, MissingFile

Batches = list[dict[str, np.ndarray]]
#: The orders searched (see the module docstring).
ORDERS: tuple[str, ...] = ("sensitivity", "graph")


@dataclass(frozen=True)
class BisectResult:
    """The layers to keep, the metric on the search and held-out samples, and how to build it."""

    precision: str
    metric: str
    target: float
    kept: tuple[str, ...]
    search_value: float
    held_out_value: float
    baseline: float  # nothing kept: every candidate layer in the lower precision
    candidates: int
    evaluations: int
    order: str
    reached: bool  # on the search samples; ``held_out_value`` says whether it carries over
    build_flags: str


def _pattern(label: str) -> str:
    return f"^{re.escape(label)}$"


def int8_build_flags(labels: Sequence[str], calibrator: str) -> str:
    """The ``trtforge build`` flags whose placement keeps exactly ``labels`` in FP16 (all else INT8)."""
    parts = ["--precision", "int8", "--calibrator", calibrator, "--no-bias-correction", "--include", ".*"]
    for label in labels:
        parts += ["--exclude", _pattern(label)]
    return " ".join(shlex.quote(p) for p in parts)


def shortest_prefix(order: Sequence[str], holds: Callable[[frozenset[str]], bool]) -> frozenset[str]:
    """The shortest prefix of ``order`` for which ``holds`` (bisection), then each member tried back out.

    ``holds`` must hold for the whole of ``order``. Example (worked): with ``holds = {"b"} <= kept``
    and order ``a b c d``, the bisection finds ``{a, b}`` and pruning leaves ``{b}``.
    """
    if holds(frozenset()):
        return frozenset()
    lo, hi = 0, len(order)  # fails at lo, holds at hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if holds(frozenset(order[:mid])):
            hi = mid
        else:
            lo = mid
    kept = set(order[:hi])
    for name in reversed(order[:hi]):  # least harmful (latest) first
        trial = frozenset(kept - {name})
        if holds(trial):
            kept = set(trial)
    return frozenset(kept)


class Int8Search:
    """Calibrated once; evaluates "these layers kept in FP16" as the build would place them."""

    def __init__(self, model: ir.Model, calibration, config: QuantConfig, preprocessing: Mapping | None) -> None:
        from trtforge.quantize import placement
        from trtforge.quantize.calibration import build_full_plan, calibrate_model, split_samples

        self.model, self.config = model, config
        self.data = split_samples(model, calibration, config, dict(preprocessing) if preprocessing else None)
        self.analysis = placement.analyse(model)
        if not self.analysis.candidates:
            raise InvalidArgument("the graph has no Conv/MatMul/Gemm layer to quantize; nothing to bisect")
        amax, shapes = calibrate_model(model, self.analysis, self.data.calib_batches, config)
        self.full = build_full_plan(model, self.analysis, amax, shapes, config.calibrator)
        self.labels = {c.output: c.label for c in self.analysis.candidates}

    def plan(self, kept_labels: frozenset[str]):
        from trtforge.quantize import placement
        from trtforge.quantize.calibration import plan_from_decisions

        decisions = placement.decide(self.analysis, [_pattern(lab) for lab in sorted(kept_labels)], (".*",))
        return plan_from_decisions(self.full, decisions)

    def outputs(self, kept_labels: frozenset[str], batches: Batches) -> list[np.ndarray]:
        from trtforge.passes.qdq import apply_plan
        from trtforge.quantize.report import run_model

        plan = self.plan(kept_labels)
        return run_model(apply_plan(self.model, plan) if plan.layers else self.model, batches)

    def orders(self) -> dict[str, list[str]]:
        from trtforge.quantize.sensitivity import rank_groups

        ranking = rank_groups(self.model, self.full, self.analysis, self.data.held_batches)
        by_harm = list(dict.fromkeys(self.labels[o] for row in ranking for o in row["layers"]))
        return {"sensitivity": by_harm, "graph": [c.label for c in self.analysis.candidates]}


class SearchTimeout(InvalidArgument):
    """The search ran past ``max_seconds``; the message says how far it got and what to change."""


@dataclass(frozen=True)
class Limits:
    """How long the search may run and whom it tells: ``progress(graphs evaluated, kept, metric value)``."""

    max_seconds: float | None = None
    progress: Callable[[int, int, float], None] | None = None


def _bisect(
    model: ir.Model, outputs: Callable[[frozenset[str], Batches], list[np.ndarray]], orders: Mapping[str, Sequence[str]],
    search: Batches, held_out: Batches, metric: str, target: float, limits: Limits = Limits(),
) -> dict:
    """The search both precisions share: the smallest kept set over ``orders``, measured on both sample sets."""
    import time

    from trtforge.quantize.report import run_model

    start = time.monotonic()
    budget = ErrorBudget.of(**{metric: target})
    search_ref, held_ref = run_model(model, search), run_model(model, held_out)
    cache: dict[frozenset[str], tuple[float, float]] = {}

    def measured(kept: frozenset[str]) -> tuple[float, float]:
        """(mean, one-sided 95 % confidence bound) of the metric on the search samples."""
        if kept not in cache:
            spent = time.monotonic() - start
            if limits.max_seconds is not None and spent > limits.max_seconds:
                raise SearchTimeout(f"--max-seconds {limits.max_seconds:g} reached after {len(cache)} graphs "
                                    f"evaluated ({spent:.0f} s); raise --max-seconds, or lower --samples/--held-out")
            out = outputs(kept, search)
            cache[kept] = budget.measure(search_ref, out)[metric], budget.bounds(search_ref, out)[metric]
            if limits.progress is not None:
                limits.progress(len(cache), len(kept), cache[kept][0])
        return cache[kept]

    def holds(kept: frozenset[str]) -> bool:
        # The bound, not the mean: a search that stops right at the target would otherwise land on
        # the wrong side of it on new samples about half the time (core.budget).
        return budget.holds({metric: measured(kept)[1]})

    every = frozenset(name for order in orders.values() for name in order)
    if holds(every):
        found = [(len(kept), i, name, kept) for i, (name, kept) in
                 enumerate((name, shortest_prefix(list(order), holds)) for name, order in orders.items())]
        _, _, order, kept = min(found, key=lambda r: r[:2])
    else:
        order, kept = "none", every  # even everything kept misses the target: say so
    held_value = budget.measure(held_ref, outputs(kept, held_out))[metric]
    return {"kept": kept, "order": order, "search_value": measured(kept)[0], "held_out_value": held_value,
            "baseline": measured(frozenset())[0], "candidates": len(every), "evaluations": len(cache),
            "reached": holds(kept)}


def bisect_int8(
    fp32: ir.Model, search: Batches, held_out: Batches, metric: str, target: float, calibration,
    preprocessing: Mapping | None = None, config: QuantConfig | None = None, orders: Sequence[str] = ORDERS,
    limits: Limits = Limits(),
) -> BisectResult:
    """The fewest layers to keep in FP16 so that ``metric`` (INT8 vs FP32) meets ``target`` on ``search``.

    ``calibration`` is anything ``trtforge build --calib`` takes (images folder, arrays, input dicts).
    """
    from trtforge.passes.graph import QDQ_OPSET, ensure_node_names, ensure_opset, fresh_ir

    if metric not in METRICS:
        raise InvalidArgument(f"metric {metric!r}; choose one of {', '.join(METRICS)}")
    config = config or QuantConfig(bias_correction=False)
    model = ensure_node_names(ensure_opset(fresh_ir(fp32), QDQ_OPSET))
    engine = Int8Search(model, calibration, config, preprocessing)
    ranked = engine.orders()
    found = _bisect(model, engine.outputs, {name: ranked[name] for name in orders}, search, held_out, metric, target,
                    limits)
    kept = sorted(found.pop("kept"))
    return BisectResult("int8", metric, target, tuple(kept), **found,
                        build_flags=int8_build_flags(kept, config.calibrator))


def bisect_float(
    fp32: ir.Model, search: Batches, held_out: Batches, metric: str, target: float, precision: str = "fp16",
    limits: Limits = Limits(),
) -> BisectResult:
    """The fewest nodes to keep in FP32 (graph order, Polygraphy's) so that ``metric`` (FP16/BF16 vs FP32)
    meets ``target``; the graph is exactly what ``trtforge build --keep-fp32 ...`` builds."""
    from trtforge.passes.float16 import infer_types, plan_float
    from trtforge.passes.graph import copy_model, ensure_node_names, load_ir
    from trtforge.passes.process import process
    from trtforge.quantize.report import run_model

    if metric not in METRICS:
        raise InvalidArgument(f"metric {metric!r}; choose one of {', '.join(METRICS)}")
    if precision not in REDUCED_PRECISIONS:
        raise InvalidArgument(f"precision={precision!r}: float bisection is for {' or '.join(REDUCED_PRECISIONS)}")
    model = infer_types(ensure_node_names(copy_model(load_ir(fp32))))
    already = plan_float(model, FLOAT_OF_PRECISION[precision]).fp32_nodes
    order = [node.name for node in model.graph if node.name not in already
             and any(o.dtype is not None and o.dtype.is_floating_point() for o in node.outputs)]

    def outputs(kept: frozenset[str], batches: Batches) -> list[np.ndarray]:
        patterns = tuple(_pattern(name) for name in sorted(kept))
        return run_model(process(model, precision, keep_fp32=patterns).model, batches)

    found = _bisect(model, outputs, {"graph": order}, search, held_out, metric, target, limits)
    kept = sorted(found.pop("kept"))
    flags = " ".join(shlex.quote(p) for p in ["--precision", precision,
                                              *[x for name in kept for x in ("--keep-fp32", _pattern(name))]])
    return BisectResult(precision, metric, target, tuple(kept), **found, build_flags=flags)


def bisection_inputs(
    model: Path, data: Path | None, preprocessing: Mapping | None, samples: int, held_out: int,
) -> tuple[ir.Model, object, Batches, Batches, Mapping | None]:
    """(FP32 graph, calibration data, search batches, held-out batches, preprocessing) for ``model``.

    ``model`` is an artifact (its FP32 reference graph and preprocessing) or an ONNX file (cleaned as
    the build cleans it). Image models with a preprocessing search on photo crops (other seeds than
    the calibration's); other models need ``data``, split into calibration, search and held-out thirds.
    """
    from trtforge.core.sidecar import read_sidecar
    from trtforge.core.specs import TensorSpec
    from trtforge.measure.inputs import make_inputs, split_batches, static_rows
    from trtforge.passes.graph import input_specs, load_ir
    from trtforge.passes.process import reference_graph

    model = Path(model)
    if model.suffix in (".json", ".engine"):
        sidecar = read_sidecar(model)
        if not (sidecar.source.reference_onnx_file or sidecar.source.onnx_file):
            raise InvalidArgument(f"sidecar {sidecar.path} names no reference ONNX graph; pass the FP32 .onnx instead")
        which = "reference" if sidecar.source.reference_onnx_file else "processed"
        model, preprocessing = sidecar.verify_source_file(which), preprocessing or sidecar.preprocessing
    elif model.suffix != ".onnx":
        raise InvalidArgument(f"{model}: give an artifact (.json/.engine) or an FP32 .onnx file")
    elif not model.is_file():
        raise MissingFile(f"bisection_inputs(model={str(model)!r}): no ONNX file there; pass the path of an "
                          "existing FP32 .onnx file or of an artifact's .json sidecar")
    graph = reference_graph(load_ir(model))
    specs = [TensorSpec(n, d.name, tuple(-1 if x is None else x for x in s)) for n, d, s in input_specs(graph)]
    batch = specs[0].shape[0] if specs and static_rows(specs, 1) is not None else 8  # a static batch as it is
    if preprocessing:
        calibration = data if data is not None else make_inputs(specs, (), 64, preprocessing, seed=0)
        search, held = (make_inputs(specs, (), n, preprocessing, seed=s) for n, s in ((samples, 1), (held_out, 2)))
        return graph, calibration, split_batches(search, batch), split_batches(held, batch), preprocessing
    if data is None:
        raise InvalidArgument("this model records no image preprocessing: pass --data (a .npy/.npz of real inputs), "
                              "or --preprocessing for an image model")
    from trtforge.quantize.data import load_calibration

    loaded = load_calibration(data, input_specs(graph), None, 3 * max(samples, held_out))
    third = len(loaded) // 3
    search_part = {k: np.concatenate([s[k] for s in loaded[third:2 * third]]) for k in loaded[0]}
    held_part = {k: np.concatenate([s[k] for s in loaded[2 * third:]]) for k in loaded[0]}
    return graph, loaded[:third], split_batches(search_part, batch), split_batches(held_part, batch), None


def _source(model: Path, sidecar) -> list[str]:
    """What ``trtforge build`` is given: the ONNX file the artifact was built from, or its module factory."""
    if sidecar is None:
        return [str(model)]
    source = sidecar.source
    if source.kind == "onnx" and source.original and Path(source.original).is_file():
        return [source.original]
    if source.factory:
        return [source.factory] + (["--path", "direct"] if source.path == "direct" else [])
    return [str(sidecar.verify_source_file("reference" if source.reference_onnx_file else "processed"))]


def _batch_text(batch) -> str:
    """The recorded batch (``["1:8:32"]``, as ``key_fields`` writes it; older records ``[[1, 8, 32]]``) as ``--batch``."""
    return ",".join(p if isinstance(p, str) else ":".join(str(int(d)) for d in p) for p in batch)


def _config_flags(config: Mapping) -> list[str]:
    """``trtforge build`` flags for the engine options a sidecar records (``builder.config``), defaults left out."""
    flags: list[str] = []
    if config.get("batch"):
        flags += ["--batch", _batch_text(config["batch"])]
    for name in config.get("batched_inputs") or ():
        flags += ["--batched-input", name]
    for target in config.get("targets") or ():
        flags += ["--target", target]
    for name, dims in config.get("shapes") or ():
        flags += ["--shapes", ":".join([name, *("x".join(str(int(d)) for d in shape) for shape in dims)])]
    if config.get("optimization_level") not in (None, 3):
        flags += ["--opt-level", str(config["optimization_level"])]
    if config.get("workspace_bytes"):
        flags += ["--workspace-mb", str(int(config["workspace_bytes"]) >> 20)]
    if config.get("hardware_compatibility"):
        flags += ["--hardware-compatibility", config["hardware_compatibility"]]
    flags += [f"--{key.replace('_', '-')}" for key in ("version_compatible", "refittable", "strip_weights",
                                                      "allow_unaccelerated", "dynamic_batch") if config.get(key)]
    return flags


#: The NMS settings a sidecar records (``builder.config["postprocess"]``) and their ``trtforge build`` flags.
NMS_FLAGS: tuple[tuple[str, str], ...] = (
    ("score_threshold", "--score-threshold"), ("iou_threshold", "--iou-threshold"),
    ("max_detections", "--max-detections"), ("candidates", "--nms-candidates"),
)


def _graph_edit_flags(config: Mapping) -> list[str]:
    """``--outputs`` and ``--nms ...`` for the cut and the NMS a sidecar records, defaults left out. Only for a
    line that builds from the user's own file: the reference ONNX beside the engine holds both edits already."""
    from trtforge.core.postprocess import NMS

    flags = ["--outputs", ",".join(config["outputs"])] if config.get("outputs") else []
    nms = config.get("postprocess")
    if nms:
        default = NMS(nms["head"])
        flags += ["--nms", nms["head"]]
        for key, flag in NMS_FLAGS:
            if key in nms and nms[key] != getattr(default, key):
                flags += [flag, str(nms[key])]
        if nms.get("class_agnostic"):
            flags.append("--nms-class-agnostic")
    return flags


def _acceleration_flags(precision: str, config: Mapping) -> list[str]:
    """``--allow-unaccelerated`` where ``build`` would refuse ``precision`` on the line's targets only because no
    target accelerates it (INT8 W8A8 on TensorRT-RTX): the bisection measured that graph's numerics, not its
    speed, so the line builds the graph it found, as ``build`` would with the flag."""
    from trtforge.builder.precision_plan import Unaccelerated, check_precision
    from trtforge.core.config import CompileConfig

    if config.get("allow_unaccelerated"):
        return []
    try:
        check_precision(CompileConfig(precision=precision, targets=tuple(config.get("targets") or ())))
    except Unaccelerated:
        allowed = CompileConfig(precision=precision, targets=tuple(config.get("targets") or ()),
                                allow_unaccelerated=True)
        try:
            check_precision(allowed)
        except Unaccelerated:
            return []  # a target cannot build it at all: build's own refusal says what to use
        return ["--allow-unaccelerated"]
    return []


def reproduce_command(model: Path, result: BisectResult, data: Path | None = None) -> str:
    """The ``trtforge build`` line that builds what the bisection found: the source model, every build option
    the artifact recorded, the kept layers, and a name of its own beside the artifact (nothing overwritten).

    Example:
        >>> reproduce_command(Path("out/m_fp16.json"), result)
        "trtforge build m.onnx --batch 1:8:32 -o out --name m_fp16_bisected --precision fp16 --keep-fp32 '^/a$'"
    """
    from trtforge.core.sidecar import read_sidecar

    model = Path(model)
    sidecar = read_sidecar(model) if model.suffix in (".json", ".engine") else None
    parts = _source(model, sidecar)
    if sidecar is not None:
        parts += _config_flags(sidecar.builder.config or {})
        if parts[0] in (sidecar.source.original, sidecar.source.factory):  # the user's file: edits not in it yet
            parts += _graph_edit_flags(sidecar.builder.config or {})
        parts += ["-o", str(sidecar.path.parent), "--name", f"{sidecar.name}_bisected"]
        if sidecar.preprocessing and result.precision == "int8":
            parts += ["--preprocessing", str(sidecar.path)]
    if result.precision == "int8":
        parts += ["--calib", str(data) if data is not None else "CALIB_IMAGES_DIR"]
    parts += _acceleration_flags(result.precision, sidecar.builder.config or {} if sidecar is not None else {})
    return " ".join(["trtforge", "build", *(shlex.quote(p) for p in parts), result.build_flags])
