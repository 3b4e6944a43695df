"""Post-training quantization (INT8, FP8, weight-only INT8/INT4): ``quantize_model``, the orchestration.

The steps, in order, on the FP32 graph: load and check the calibration data (errors before any
work), SmoothQuant (optional; W8A8 precisions) or AWQ-lite (optional; weight-only), observers and
calibrators (or the calibration cache), cross-layer equalization and bias absorption (optional; W8A8:
the equalized graph is calibrated too and kept when it quantizes closer to FP32 on the held-back
samples), the placement (rules or measured, on the graph kept), the frozen ``QuantPlan``,
learned rounding or GPTQ (optional; GPTQ rewrites weight-only weights and their scales), bias
correction (optional), quantization-aware fine-tuning (optional, INT8; ``trtforge.quantize.methods.distill``: it starts
from the finished graph and is kept only when it beats it on the held-back samples), the accuracy report on held-back samples (ONNX Runtime, FP32 scales).
What differs between precisions is data (``trtforge.quantize.precision.SPECS``). The graph handed to
TensorRT is ``trtforge.passes.process(result.fp32, precision, result.plan)``: the FP16 pass, then the
same plan with FP16 scales.

Example:
    >>> result = quantize_model(fp32_model, Path("calib/"), QuantConfig(calibrator="entropy"),
    ...                         preprocessing=LITE0_PREPROCESSING)
    >>> result.report["measured"]["top1_agreement"]
    0.98
    >>> onnx.save(result.model, "lite0_int8_qdq.onnx")
    >>> fp8 = quantize_model(fp32_model, Path("calib/"), QuantConfig(), LITE0_PREPROCESSING, precision="fp8")
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

from trtforge.cache.calib_cache import CalibrationCache
from trtforge.core.budget import ErrorBudget, resolve_budget
from trtforge.core.config import QuantConfig, check_quant_options
from trtforge.core.errors import InvalidArgument, spelled
from trtforge.core.preprocessing import PreprocessConfig
from trtforge.passes.graph import (
    ensure_node_names,
    ensure_opset,
    fresh_ir,
    input_specs,
    to_proto,
    values_by_name,
)
from trtforge.passes.process import Processed, process
from trtforge.passes.qdq import QuantPlan, apply_plan
from trtforge.quantize import placement, sensitivity
from trtforge.quantize.calibration import (
    CalibrationSet,
    build_full_plan,
    calibrate_model,
    plan_from_decisions,
    split_samples,
)
from trtforge.quantize.data import CalibrationDataError, data_hash
from trtforge.quantize.methods import adaround, awq, bias_correction, gptq, smoothquant
from trtforge.quantize.methods.equalize import equalize_for_quantization
from trtforge.quantize.precision import PrecisionSpec, check_without_data, spec_of
from trtforge.quantize.progress import progress_bar
from trtforge.quantize.report import (
    compare_outputs,
    finish_report,
    plan_summary,
    print_report,
    run_model,
    settings_report,
)
from trtforge.quantize.task import detect_task, output_dims

log = logging.getLogger(__name__)

#: What a weight-only report says when no calibration data was given (``QuantizationRecord.calibration_data``).
NO_DATA = "none: weight scales from the weights alone (absmax per channel or block); no accuracy measured"

#: The fix of a graph with nothing to quantize, in Python terms (the CLI's is ``--precision fp16``).
FP16_FIX = "precision='fp16'"


def _what(spec: PrecisionSpec) -> str:
    if spec.weight_only:
        return "MatMul or Gemm layer with a constant 2-D weight (weight-only quantizes GEMM weights)"
    return "Conv, ConvTranspose, MatMul or Gemm layer with float inputs"


@dataclass
class QuantResult:
    """The FP32 graph the plan was computed on, its Q/DQ FP32 simulation, the plan and the report.

    ``model`` (the Q/DQ FP16 graph for TensorRT), ``sim_model`` and ``fp32_model`` are their
    ONNX protos, made when first read.
    """

    fp32: ir.Model
    sim: ir.Model
    plan: QuantPlan
    report: dict[str, Any]
    sensitivity: list[dict[str, Any]] = field(default_factory=list)

    @cached_property
    def processed(self) -> Processed:
        return process(self.fp32, self.plan.precision, self.plan)

    @cached_property
    def model(self) -> onnx.ModelProto:
        return to_proto(self.processed.model)

    @cached_property
    def sim_model(self) -> onnx.ModelProto:
        return to_proto(self.sim)

    @cached_property
    def fp32_model(self) -> onnx.ModelProto:
        return to_proto(self.fp32)


def _settings(config: QuantConfig, task: str, data: CalibrationSet, spec: PrecisionSpec) -> dict[str, Any]:
    return settings_report(config, task, (len(data.calib), len(data.holdout)), spec.precision, spec.block_size)


def _calibrate_cached(model: ir.Model, analysis: placement.Analysis, data: CalibrationSet, config: QuantConfig,
                      spec: PrecisionSpec, report: dict, bar) -> tuple[dict[str, float], dict[str, tuple[int, ...]], str]:
    """amax and shapes from the calibration cache, else calibrated (and stored); also the data hash."""
    cache = CalibrationCache(config.cache_dir) if config.cache_dir else None
    graph_hash = cache.graph_hash(to_proto(model)) if cache else None
    data_sha = data_hash(data.calib)
    key = {**config.calibration_key(), "grid": spec.activation_dtype}  # mse's grid differs per dtype
    entry = cache.load(graph_hash, data_sha, key) if cache else None
    if entry is not None:
        report["cache"] = "hit"
        return *entry, data_sha
    amax, shapes = calibrate_model(model, analysis, data.calib_batches, config, bar, spec)
    if cache:
        cache.save(graph_hash, data_sha, key, amax, shapes)
    report["cache"] = "miss" if cache else "off"
    return amax, shapes, data_sha


def _calibrated(model: ir.Model, data: CalibrationSet, config: QuantConfig, spec: PrecisionSpec, report: dict,
                bar) -> tuple[placement.Analysis, QuantPlan, str]:
    """The graph's analysis, its full plan (every candidate, calibrated) and the data hash; refuses a graph
    with nothing to quantize before calibrating."""
    analysis = placement.analyse(model)
    if not spec.candidates(analysis).candidates:
        raise InvalidArgument(f"the graph has no {_what(spec)} to quantize; build it with "
                              f"{spelled(cli='--precision fp16', python=FP16_FIX)} instead")
    amax, shapes, data_sha = _calibrate_cached(model, analysis, data, config, spec, report, bar)
    return analysis, build_full_plan(model, analysis, amax, shapes, config.calibrator, spec), data_sha


def _start_plan(analysis: placement.Analysis, full: QuantPlan, config: QuantConfig) -> QuantPlan:
    """The plan placement starts from: the rules' decisions, or (placement="auto") every candidate but the
    user's exclusions. ``analysis`` holds the candidates of the plan's precision (``PrecisionSpec.candidates``)."""
    rules = spec_of(full.precision).rules if config.placement != "auto" else False
    return plan_from_decisions(full, placement.decide(analysis, config.exclude, config.include, rules=rules))


def _equalize(reference_out, model: ir.Model, analysis: placement.Analysis, full: QuantPlan, data: CalibrationSet,
              config: QuantConfig, spec: PrecisionSpec, budget: ErrorBudget, report: dict, bar,
              ) -> tuple[ir.Model, placement.Analysis, QuantPlan]:
    """(graph, analysis, full plan), equalized and bias-absorbed (``trtforge.quantize.methods.equalize``) and calibrated
    again, when that graph, quantized at the plan placement starts from, is closer to FP32 on the held-back
    samples (``bias_correction.verdict``: lower relative L2, and a budget that held still holds)."""
    start = time.perf_counter()
    held = data.held_batches
    equalized, info = equalize_for_quantization(model, data.calib_batches, held)
    if not info["pairs"]:  # nothing to equalize (absorption needs a pair too): no second calibration
        report["equalization"] = {"applied": False, **info}
        return model, analysis, full
    scratch: dict[str, Any] = {}
    eq_analysis, eq_full, _ = _calibrated(equalized, data, config, spec, scratch, bar)
    before = run_model(apply_plan(model, _start_plan(spec.candidates(analysis), full, config)), held)
    after = run_model(apply_plan(equalized, _start_plan(spec.candidates(eq_analysis), eq_full, config)), held)
    keep, verdict = bias_correction.verdict(reference_out, before, after, budget, info["pairs"])
    report["equalization"] = {"applied": keep, "rel_l2_before": verdict["rel_l2_before"],
                              "rel_l2_after": verdict["rel_l2_after"], **info}
    _method(report, "equalization", start, keep, reference_out, after)
    if not keep:
        return model, analysis, full
    report["cache"] = scratch["cache"]
    return equalized, eq_analysis, eq_full


def _place(model: ir.Model, analysis: placement.Analysis, full: QuantPlan, data: CalibrationSet,
           config: QuantConfig, budget: ErrorBudget, report: dict, bar, reference_out) -> tuple[QuantPlan, ir.Model]:
    """The plan: the rules' decisions, or measured placement against ``budget`` (placement="auto").

    ``analysis`` holds the candidates of the plan's precision (``PrecisionSpec.candidates``).
    """
    if config.placement != "auto":
        return _start_plan(analysis, full, config), model
    base = _start_plan(analysis, full, config)
    original = model
    if config.rounding == "learned":  # placement measures the learned weights, so fewer layers go back to FP16
        model = _learn_rounding(reference_out, model, base, data, config, report, bar)
    # Ranked on the held-back samples; the budget is checked on every sample (calibration and held
    # back: more samples, a tighter confidence bound), before bias correction.
    held = data.held_batches
    plan, ranking, placed = sensitivity.auto_place(model, base, analysis, held, budget, progress=bar,
                                                   check_batches=data.calib_batches + held)
    report["sensitivity"] = ranking
    report["auto_placement"] = {"budget_at_placement": budget.record(placed["measured"], placed["bounds"]),
                                "samples": placed["samples"], "checks": placed["checks"],
                                "readmitted": placed["readmitted"]}
    return plan, adaround.restore_weights(model, original, base, plan)


def _learn_rounding(reference_out, model: ir.Model, plan: QuantPlan, data: CalibrationSet, config: QuantConfig,
                    report: dict, bar) -> ir.Model:
    """``model`` with learned INT8 rounding of the plan's weights (``trtforge.quantize.methods.adaround``)."""
    start = time.perf_counter()
    rounded, layers = adaround.learn_rounding(model, plan, data.calib_batches, config.rounding_seconds, progress=bar)
    before = compare_outputs(reference_out, run_model(apply_plan(model, plan), data.held_batches))["rel_l2_mean"]
    rounded_out = run_model(apply_plan(rounded, plan), data.held_batches)
    after = compare_outputs(reference_out, rounded_out)["rel_l2_mean"]
    keep = after <= before  # per layer it lowered the output MSE; kept when the whole graph agrees
    report["learned_rounding"] = {"applied": keep, "rel_l2_before": before, "rel_l2_after": after,
                                  "layers": layers}
    _method(report, "learned_rounding", start, keep, reference_out, rounded_out)
    return rounded if keep else model


def _gptq(reference_out, model: ir.Model, plan: QuantPlan, data: CalibrationSet, report: dict, bar,
          ) -> tuple[ir.Model, QuantPlan]:
    """``model`` and ``plan`` with GPTQ-rounded weight-only weights (``trtforge.quantize.methods.gptq``), when that helps."""
    start = time.perf_counter()
    model, plan, out = gptq.gptq_if_better(reference_out, model, plan, data, report, progress=bar)
    _method(report, "gptq", start, report["gptq"]["applied"], reference_out, out)
    return model, plan


def _finetune(reference: ir.Model, reference_out, model: ir.Model, sim: ir.Model, sim_out, plan: QuantPlan,
              data: CalibrationSet, config: QuantConfig, budget: ErrorBudget, report: dict, bar,
              ) -> tuple[ir.Model, ir.Model, list]:
    """(FP32 graph, its Q/DQ simulation, the simulation's held-back outputs), with the quantized layers' weights and
    biases fine-tuned under the plan's fake quantization, distilled from ``reference`` on the calibration samples
    (``trtforge.quantize.methods.distill``), when that lowers the held-back error of the graph it starts from, the
    finished (bias-corrected) one (``bias_correction.verdict``)."""
    from trtforge.quantize.methods import distill as finetune  # torch: imported only when asked for

    start = time.perf_counter()
    if not plan.layers:
        report["finetune"] = {"applied": False, "reason": "no quantized layer"}
        return model, sim, sim_out
    tuned, info = finetune.finetune(model, plan, data.calib_batches, config.finetune_seconds, progress=bar,
                                    reference=reference)
    tuned_sim = apply_plan(tuned, plan)
    tuned_out = run_model(tuned_sim, data.held_batches)
    keep, verdict = bias_correction.verdict(reference_out, sim_out, tuned_out, budget, info["weights"])
    report["finetune"] = {**verdict, **info}
    _method(report, "finetune", start, keep, reference_out, tuned_out)
    return (tuned, tuned_sim, tuned_out) if keep else (model, sim, sim_out)


def _method(report: dict, name: str, start: float, applied: bool, reference_out, out) -> None:
    """One entry of ``report["methods"]``: a method that ran, its time, and the held-back metrics of the
    graph it produced (whether kept or not)."""
    task = report["task"]
    report.setdefault("methods", []).append({
        "method": name, "applied": bool(applied), "seconds": round(time.perf_counter() - start, 3),
        "held_back": compare_outputs(reference_out, out, classification=task == "classification")})


def _correct(reference_out, model: ir.Model, plan: QuantPlan, data: CalibrationSet, config: QuantConfig,
             budget: ErrorBudget, report: dict, bar) -> tuple[ir.Model, ir.Model, list]:
    """(FP32 graph, its Q/DQ simulation, the simulation's held-back outputs), bias-corrected when that helps."""
    sim = apply_plan(model, plan)
    held = data.held_batches
    sim_out = run_model(sim, held)
    if not (config.bias_correction and plan.layers):
        return model, sim, sim_out
    start = time.perf_counter()
    corrected, bc_info = bias_correction.correct_biases(model, plan, data.calib_batches, progress=bar)
    corrected_sim = apply_plan(corrected, plan)
    corrected_out = run_model(corrected_sim, held)
    keep, report["bias_correction"] = bias_correction.verdict(reference_out, sim_out, corrected_out, budget,
                                                              len(bc_info))
    _method(report, "bias_correction", start, keep, reference_out, corrected_out)
    return (corrected, corrected_sim, corrected_out) if keep else (model, sim, sim_out)


def _finish_report(report: dict, config: QuantConfig, budget: ErrorBudget, plan: QuantPlan, layers_total: int,
                   ref_out, sim_out, model: ir.Model, data_sha: str) -> None:
    finish_report(report, config, budget, plan, layers_total, ref_out, sim_out)
    report["graph_sha256"] = CalibrationCache.graph_hash(to_proto(model))
    report["data_sha256"] = data_sha


def _checked_start(fp32, calibration_data, config: QuantConfig, preprocessing: PreprocessConfig | Mapping | None,
                   precision: str, opset: int):
    """(model, task, budget, data): everything that can refuse the input, before any calibration."""
    check_quant_options(config, precision)
    model = ensure_node_names(ensure_opset(fresh_ir(fp32), opset))
    if config.finetune_seconds is not None:
        from trtforge.quantize.methods.torch_graph import (
            unsupported_ops,  # torch: imported only when asked for
        )

        if missing := unsupported_ops(model):
            raise InvalidArgument(f"finetune_seconds= (--finetune-seconds) evaluates the graph in PyTorch, which has no "
                                  f"{', '.join(missing)} here; drop the option for this model")
    task = detect_task(model, config.task)
    budget = resolve_budget(task, config.error_budget)
    if task == "classification" and len(output_dims(model)) != 2:
        raise InvalidArgument("task='classification' needs a first output shaped (batch, classes); "
                                   "pass task='other' (relative L2 budget) for this model")
    data = split_samples(model, calibration_data, config, preprocessing)
    if not data.calib or len(data.calib) < data.batch:
        total = len(data.calib) + len(data.holdout)
        raise CalibrationDataError(f"{total} samples leave fewer than one batch of {data.batch} for calibration")
    return model, task, budget, data


def quantize_model(
    fp32: ir.Model | onnx.ModelProto,
    calibration_data,
    config: QuantConfig | None = None,
    preprocessing: PreprocessConfig | Mapping | None = None,
    progress: bool = True,
    precision: str = "int8",
) -> QuantResult:
    """FP32 graph (not modified) + calibration data → the ``precision`` plan, with a measured report.

    ``precision``: int8 (W8A8), fp8 (E4M3), int8-wo or int4-wo (weight-only GEMMs). The weight-only ones
    take ``calibration_data=None``: ``quantize_weights``.

    Example:
        >>> result = quantize_model(model, np.load("calib.npy"), QuantConfig())
        >>> result.report["coverage"]        # share of MACs in INT8
        0.91
    """
    config = config or QuantConfig()
    spec = spec_of(precision, config)
    if calibration_data is None and spec.weight_only:
        return quantize_weights(fp32, config, spec, progress)
    model, task, budget, data = _checked_start(fp32, calibration_data, config, preprocessing, spec.precision,
                                               spec.opset)
    reference = model
    report = _settings(config, task, data, spec)
    with progress_bar(progress) as bar:
        if config.smoothquant is not None:
            model, report["smoothquant"] = smoothquant.smooth(model, data.calib_batches, config.smoothquant,
                                                              progress=bar)
        analysis, full, data_sha = _calibrated(model, data, config, spec, report, bar)
        ref_out = run_model(reference, data.held_batches)
        if config.equalize:  # before placement: placement="auto" searches on the graph kept
            model, analysis, full = _equalize(ref_out, model, analysis, full, data, config, spec, budget, report, bar)
        plan, model = _place(model, spec.candidates(analysis), full, data, config, budget, report, bar, ref_out)
        if config.awq:
            model, plan = awq.awq_if_better(ref_out, model, plan, spec, data, report, bar)
        if config.rounding == "gptq":
            model, plan = _gptq(ref_out, model, plan, data, report, bar)
        if config.rounding == "learned" and config.placement != "auto":  # auto: learned before placement
            model = _learn_rounding(ref_out, model, plan, data, config, report, bar)
        model, sim, sim_out = _correct(ref_out, model, plan, data, config, budget, report, bar)
        if config.finetune_seconds is not None:  # last: it starts from, and must beat, the finished graph
            model, sim, sim_out = _finetune(reference, ref_out, model, sim, sim_out, plan, data, config, budget,
                                            report, bar)
    _finish_report(report, config, budget, plan, len(spec.candidates(analysis).candidates), ref_out, sim_out, model,
                   data_sha)
    if progress:
        print_report(report)
    return QuantResult(fp32=model, sim=sim, plan=plan, report=report, sensitivity=report.get("sensitivity", []))


def quantize_weights(fp32: ir.Model | onnx.ModelProto, config: QuantConfig, spec: PrecisionSpec,
                     progress: bool = True) -> QuantResult:
    """Weight-only quantization without calibration data: each GEMM weight's scales from its own absmax (per
    output channel, or per block along the reduction axis), the placement rules and ``exclude``/``include``,
    nothing measured. The report says so (``calibration_data``, no ``measured``); options that measure on data
    (AWQ, GPTQ or learned rounding, ``placement="auto"``, ``error_budget=``) are refused before any work.

    Example:
        >>> result = quantize_weights(onnx.load("encoder.onnx"), QuantConfig(), spec_of("int4-wo"), progress=False)
        >>> result.report["calibration_data"], result.report["measured"]
        ('none: weight scales from the weights alone (absmax per channel or block); no accuracy measured', None)
    """
    check_quant_options(config, spec.precision)
    check_without_data(config, spec.precision)
    model = ensure_node_names(ensure_opset(fresh_ir(fp32), spec.opset))
    task = detect_task(model, config.task)
    analysis = placement.analyse(model)
    if not spec.candidates(analysis).candidates:
        raise InvalidArgument(f"the graph has no {_what(spec)} to quantize; build it with "
                              f"{spelled(cli='--precision fp16', python=FP16_FIX)} instead")
    full = build_full_plan(model, analysis, {}, _shapes_without_data(model, analysis, config, spec),
                           config.calibrator, spec)
    plan = _start_plan(spec.candidates(analysis), full, config)
    report = {**settings_report(config, task, (0, 0), spec.precision, spec.block_size), "bias_correction": False,
              "calibration_data": NO_DATA, "measured": None,
              **plan_summary(plan, len(spec.candidates(analysis).candidates)),
              "graph_sha256": CalibrationCache.graph_hash(to_proto(model))}
    if progress:
        print_report(report)
    return QuantResult(fp32=model, sim=apply_plan(model, plan), plan=plan, report=report)


def _shapes_without_data(model: ir.Model, analysis: placement.Analysis, config: QuantConfig,
                         spec: PrecisionSpec) -> dict[str, tuple[int, ...]]:
    """The layers' shapes for the MAC counts (the report's coverage): the graph run once on zeros with every
    dynamic dimension 1; where ONNX Runtime refuses such an input, the graph's own static shapes (dynamic as 1)."""
    feed = {name: np.zeros(tuple(1 if d is None or d <= 0 else d for d in shape), dtype)
            for name, dtype, shape in input_specs(model)}
    try:
        return calibrate_model(model, analysis, [feed], config, None, spec)[1]
    except Exception as exc:  # noqa: BLE001 - any ONNX Runtime failure on a made-up input: fall back, say so
        log.info("weight-only without data: the graph does not run on zeros with dynamic dims 1 (%s); MACs "
                 "counted from its static shapes", exc)
    return {name: tuple(d if isinstance(d, int) else 1 for d in value.shape)
            for name, value in values_by_name(model.graph).items() if value.shape is not None}
