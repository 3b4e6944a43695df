"""INT8 post-training quantization: ``QuantConfig`` and ``quantize_model``.

The steps, in order, on the FP32 graph: load and check the calibration data (errors before any
work), SmoothQuant (optional), observers and calibrators (or the calibration cache), the
placement (rules or measured), the frozen ``QuantPlan``, bias correction (optional), the
accuracy report on held-back samples (ONNX Runtime, FP32 scales); then the FP16 pass and the
same plan applied with FP16 scales: the graph handed to TensorRT.

Example:
    >>> result = quantize_model(fp32_proto, Path("calib/"), QuantConfig(calibrator="entropy"),
    ...                         preprocessing=LITE0_PREPROCESSING)
    >>> result.report["measured"]["top1_agreement"]
    0.98
    >>> onnx.save(result.model, "lite0_int8_qdq.onnx")
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from trtforge.cache.calib_cache import CalibrationCache
from trtforge.core.config import PLACEMENTS, TASKS, QuantConfig  # noqa: F401 - defined in core
from trtforge.quantize import placement as placement_mod
from trtforge.quantize.budget import resolve_budget
from trtforge.quantize.calibrators import calibrate, weight_scales
from trtforge.quantize.data import CalibrationDataError, batches, check_count, data_hash, load_calibration
from trtforge.quantize.graph_tools import GraphIndex, ensure_node_names, ensure_opset, input_specs
from trtforge.quantize.observers import observe
from trtforge.quantize.plan import QuantInput, QuantLayer, QuantPlan, fp16_scales
from trtforge.quantize.qdq import apply_plan
from trtforge.quantize.report import compare_outputs, print_report, run_model


@dataclass
class QuantResult:
    """The Q/DQ FP16 graph for TensorRT, its FP32 twin for ONNX Runtime, the plan and the report."""

    model: onnx.ModelProto
    sim_model: onnx.ModelProto
    fp32_model: onnx.ModelProto
    plan: QuantPlan
    report: dict[str, Any]
    sensitivity: list[dict[str, Any]] = field(default_factory=list)


def _progress(enabled: bool):
    if not enabled:
        return contextlib.nullcontext(None)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    transient=False)


def _batch_size(specs, config: QuantConfig) -> int:
    static = {s[2][0] for s in specs if s[2] and s[2][0] not in (None, 0)}
    return int(next(iter(static))) if static else config.batch_size


def _macs(c: placement_mod.Candidate, index: GraphIndex, shapes: dict[str, tuple[int, ...]]) -> int:
    out = shapes.get(c.output)
    if not out:
        return 0
    per_sample = int(np.prod(out[1:])) if len(out) > 1 else int(np.prod(out))
    if c.op_type == "Conv":
        w = index.constant(c.weight[1])
        return per_sample * int(np.prod(w.shape[1:]))
    if c.op_type == "ConvTranspose":
        w = index.constant(c.weight[1])
        inp = shapes.get(c.activations[0][1], ())
        return int(np.prod(inp[1:])) * int(np.prod(w.shape[1:])) if inp else 0
    if c.weight is not None and c.op_type == "Gemm":
        w = index.constant(c.weight[1])
        node = index.producer[c.output]
        k = w.shape[1] if (c.weight[0] == 1 and placement_mod.attr(node, "transB", 0)) else w.shape[0]
        return per_sample * int(k)
    a = shapes.get(c.activations[0][1])
    if c.activations[0][0] == 0 and a:
        return per_sample * int(a[-1])
    if c.weight is not None:
        w = index.constant(c.weight[1])
        return per_sample * int(w.shape[-2] if w.ndim >= 2 else w.shape[0])
    return 0


def build_full_plan(
    model: onnx.ModelProto,
    analysis: placement_mod.Analysis,
    amax: dict[str, float],
    shapes: dict[str, tuple[int, ...]],
    calibrator: str,
) -> QuantPlan:
    """A plan that quantizes every candidate (placement then removes layers from it)."""
    index = GraphIndex(model)
    layers, total = [], 0
    for c in analysis.candidates:
        macs = _macs(c, index, shapes)
        total += macs
        inputs = [QuantInput(idx, name, fp16_scales([amax[name] / 127.0])) for idx, name in c.activations]
        if c.weight is not None:
            idx, name, axis = c.weight
            scales = weight_scales(index.constant(name), axis)
            inputs.append(QuantInput(idx, name, fp16_scales(scales), axis, True))
        layers.append(QuantLayer(c.output, c.op_type, c.label, tuple(sorted(inputs, key=lambda q: q.index)), macs))
    return QuantPlan(tuple(layers), (), calibrator, total)


def plan_from_decisions(full: QuantPlan, decisions: dict[str, str | None]) -> QuantPlan:
    keep = [layer for layer in full.layers if not decisions.get(layer.output)]
    excluded = tuple((layer.label, decisions[layer.output]) for layer in full.layers if decisions.get(layer.output))
    return QuantPlan(tuple(keep), excluded, full.calibrator, full.total_macs)


#: Ops between an L2 norm and the Div that applies it (clamping, broadcasting).
_NORM_PATH_OPS = frozenset({"Clip", "Max", "Expand", "Unsqueeze", "Reshape", "Cast", "Add", "Sqrt", "Identity"})


def _l2_normalised(model: onnx.ModelProto, output: str) -> bool:
    """Whether ``output`` is LpNormalization(p=2), or x / ‖x‖₂ (ReduceL2, or Sqrt of a sum of squares)."""
    producer = {o: n for n in model.graph.node for o in n.output}
    node = producer.get(output)
    if node is None:
        return False
    if node.op_type == "LpNormalization":
        return placement_mod.attr(node, "p", 2) == 2
    if node.op_type != "Div" or len(node.input) < 2:
        return False
    frontier, seen = [node.input[1]], set()
    while frontier:
        name = frontier.pop()
        n = producer.get(name)
        if n is None or n.name in seen:
            continue
        seen.add(n.name)
        if n.op_type in ("ReduceL2", "ReduceSumSquare"):
            return True
        if n.op_type in _NORM_PATH_OPS:
            frontier.extend(i for i in n.input[:1] if i)
    return False


def detect_task(model: onnx.ModelProto, task: str = "auto") -> str:
    """classification (image in, N×classes out), embedding (an L2-normalised N×D output), or other.

    Example:
        >>> detect_task(onnx.load("efficientnet_lite0.onnx"))
        'classification'
    """
    if task != "auto":
        return task
    specs = input_specs(model)
    out = model.graph.output[0].type.tensor_type.shape.dim
    image_input = len(specs) == 1 and len(specs[0][2]) == 4 and specs[0][1].kind == "f"
    if image_input and len(out) == 2 and out[1].HasField("dim_value") and out[1].dim_value >= 5:
        return "classification"
    if len(model.graph.output) == 1 and len(out) == 2 and _l2_normalised(model, model.graph.output[0].name):
        return "embedding"
    return "other"


def calibrate_model(
    model: onnx.ModelProto,
    analysis: placement_mod.Analysis,
    calib_batches: list[dict[str, np.ndarray]],
    config: QuantConfig,
    progress=None,
) -> tuple[dict[str, float], dict[str, tuple[int, ...]]]:
    """amax per activation tensor (with ``config.calibrator``) and the observed shapes."""
    tensors = sorted({name for c in analysis.candidates for _, name in c.activations})
    shapes_of = [c.output for c in analysis.candidates]
    stats = observe(model, tensors, calib_batches, shapes_of=shapes_of + tensors, num_bins=config.num_bins,
                    progress=progress, total=len(calib_batches))
    amax = {name: calibrate(stats.histograms[name], config.calibrator, config.percentile) for name in tensors}
    return amax, stats.shapes


def quantize_model(
    fp32_proto: onnx.ModelProto,
    calibration_data,
    config: QuantConfig | None = None,
    preprocessing: dict | None = None,
    progress: bool = True,
) -> QuantResult:
    """FP32 ONNX graph + calibration data → Q/DQ FP16 graph for TensorRT, with a measured report.

    Example:
        >>> result = quantize_model(proto, np.load("calib.npy"), QuantConfig())
        >>> result.report["coverage"]        # share of MACs in INT8
        0.91
    """
    from trtforge.quantize import bias_correction, sensitivity, smoothquant

    config = config or QuantConfig()
    model = onnx.ModelProto()
    model.CopyFrom(fp32_proto)
    model = ensure_node_names(ensure_opset(model, 19))
    reference = model
    task = detect_task(model, config.task)
    budget = resolve_budget(task, config.error_budget)  # refused here, before any calibration
    if task == "classification" and len(model.graph.output[0].type.tensor_type.shape.dim) != 2:
        raise ValueError("task='classification' needs a first output shaped (batch, classes); "
                         "pass task='other' (relative L2 budget) for this model")
    specs = input_specs(model)
    samples = load_calibration(calibration_data, specs, preprocessing, config.max_images)
    batch = _batch_size(specs, config)
    held = max(1, int(round(len(samples) * config.holdout)))
    check_count(samples, batch, held)
    if len(samples) - held < batch:
        raise CalibrationDataError(f"{len(samples)} samples leave fewer than one batch of {batch} for calibration")
    calib, holdout = samples[: len(samples) - held], samples[len(samples) - held :]
    calib_batches, held_batches = batches(calib, batch), batches(holdout, batch)
    report: dict[str, Any] = {
        "calibrator": config.calibrator,
        "percentile": config.percentile if config.calibrator == "percentile" else None,
        "smoothquant_alpha": config.smoothquant,
        "bias_correction": config.bias_correction,
        "placement": config.placement,
        "task": task,
        "samples": {"calibration": len(calib), "held_back": len(holdout)},
    }
    with _progress(progress) as bar:
        if config.smoothquant is not None:
            model, sq_info = smoothquant.smooth(model, calib_batches, config.smoothquant, progress=bar)
            report["smoothquant"] = sq_info
        analysis = placement_mod.analyse(model)
        if not analysis.candidates:
            raise ValueError("the graph has no Conv, ConvTranspose, MatMul or Gemm layer with float inputs to quantize")
        cache = CalibrationCache(config.cache_dir) if config.cache_dir else None
        graph_hash = cache.graph_hash(model) if cache else None
        data_sha = data_hash(calib)
        entry = cache.load(graph_hash, data_sha, config.calibration_key()) if cache else None
        if entry is None:
            amax, shapes = calibrate_model(model, analysis, calib_batches, config, bar)
            if cache:
                cache.save(graph_hash, data_sha, config.calibration_key(), amax, shapes)
            report["cache"] = "miss" if cache else "off"
        else:
            amax, shapes = entry
            report["cache"] = "hit"
        full = build_full_plan(model, analysis, amax, shapes, config.calibrator)
        if config.placement == "auto":
            decisions = placement_mod.decide(analysis, config.exclude, config.include, rules=False)
            base = plan_from_decisions(full, decisions)
            # Ranked on the held-back samples; the budget is checked on every sample (calibration and
            # held back: more samples, a tighter confidence bound), before bias correction.
            plan, ranking, placed = sensitivity.auto_place(model, base, analysis, held_batches, budget,
                                                           progress=bar, check_batches=calib_batches + held_batches)
            report["sensitivity"] = ranking
            report["auto_placement"] = {"budget_at_placement": budget.record(placed["measured"], placed["bounds"]),
                                        "samples": placed["samples"], "checks": placed["checks"],
                                        "readmitted": placed["readmitted"]}
        else:
            plan = plan_from_decisions(full, placement_mod.decide(analysis, config.exclude, config.include))
        sim = apply_plan(model, plan)
        ref_out = run_model(reference, held_batches)
        sim_out = run_model(sim, held_batches)
        if config.bias_correction and plan.layers:
            corrected, bc_info = bias_correction.correct_biases(model, plan, calib_batches, progress=bar)
            corrected_sim = apply_plan(corrected, plan)
            corrected_out = run_model(corrected_sim, held_batches)
            before = compare_outputs(ref_out, sim_out)["rel_l2_mean"]
            after = compare_outputs(ref_out, corrected_out)["rel_l2_mean"]
            # Kept only when it helps on the held-back samples (it can hurt, e.g. where padding
            # tokens dominate a channel mean) and does not break an error budget that held without it.
            keep = after < before and (budget.holds(budget.measure(ref_out, corrected_out))
                                       or not budget.holds(budget.measure(ref_out, sim_out)))
            report["bias_correction"] = {"applied": keep, "rel_l2_before": before, "rel_l2_after": after,
                                         "layers": len(bc_info)}
            if keep:
                model, sim, sim_out = corrected, corrected_sim, corrected_out
    report["measured"] = compare_outputs(ref_out, sim_out, classification=task == "classification")
    final = budget.measure(ref_out, sim_out)
    report["error_budget"] = {
        "source": "default" if config.error_budget is None else "error_budget=",
        "task": task, "description": budget.describe(), "holds": budget.holds(final),
        "used_by_placement": config.placement == "auto",
        "limits": budget.record(final),  # measured on the held-back samples, the final graph
    }
    report["coverage"] = plan.coverage
    report["int8_layers"] = len(plan.layers)
    report["layers_total"] = len(analysis.candidates)
    report["excluded_layers"] = [{"layer": label, "reason": reason} for label, reason in plan.excluded]
    report["graph_sha256"] = CalibrationCache.graph_hash(model)
    report["data_sha256"] = data_sha
    fp16 = to_fp16(model)
    qdq = apply_plan(fp16, plan)
    if progress:
        print_report(report)
    return QuantResult(model=qdq, sim_model=sim, fp32_model=model, plan=plan, report=report,
                       sensitivity=report.get("sensitivity", []))


def to_fp16(model: onnx.ModelProto) -> onnx.ModelProto:
    """The FP16 pass of ``trtforge.passes`` (FP32 graph I/O kept) as an ONNX proto."""
    from trtforge.passes.float16 import convert_float
    from trtforge.passes.graph import load_ir, to_proto

    converted = to_proto(convert_float(load_ir(model), "float16"))
    return ensure_node_names(ensure_opset(converted, 19))
