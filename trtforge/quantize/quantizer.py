"""Post-training quantization (INT8, FP8, weight-only INT8/INT4): ``quantize_model``, the orchestration.

The steps, in order, on the FP32 graph: load and check the calibration data (errors before any work), the
methods of the ``graph`` stage (SmoothQuant), observers and calibrators (or the calibration cache), the methods
of the ``calibrated`` stage (cross-layer equalization: the equalized graph is calibrated too), the placement
(rules, or measured after the ``start_plan`` methods), the methods of the ``placed`` stage (AWQ-lite, GPTQ,
learned rounding) and of the ``finished`` stage (bias correction, then fine-tuning), and the accuracy report on
held-back samples (ONNX Runtime, FP32 scales). Each method is a pass of ``trtforge.quantize.methods.METHODS``;
the one driver (``trtforge.quantize.driver.run_stage``) times it, measures it on the held-back samples, keeps
it when its keep rule says so and writes its report entry and row.
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
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

from trtforge.cache.calib_cache import CalibrationCache
from trtforge.core.budget import ErrorBudget, resolve_budget
from trtforge.core.config import QuantConfig, check_quant_options
from trtforge.core.errors import InvalidArgument
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
from trtforge.quantize.driver import measured, run_stage
from trtforge.quantize.method import State, Tools
from trtforge.quantize.methods import adaround
from trtforge.quantize.precision import PrecisionSpec, check_without_data, require_candidates, spec_of
from trtforge.quantize.progress import progress_bar
from trtforge.quantize.report import (
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
    require_candidates(spec, analysis)
    amax, shapes, data_sha = _calibrate_cached(model, analysis, data, config, spec, report, bar)
    return analysis, build_full_plan(model, analysis, amax, shapes, config.calibrator, spec), data_sha


def _start_plan(analysis: placement.Analysis, full: QuantPlan, config: QuantConfig) -> QuantPlan:
    """The plan placement starts from: the rules' decisions, or (placement="auto") every candidate but the
    user's exclusions. ``analysis`` holds the candidates of the plan's precision (``PrecisionSpec.candidates``)."""
    rules = spec_of(full.precision).rules if config.placement != "auto" else False
    return plan_from_decisions(full, placement.decide(analysis, config.exclude, config.include, rules=rules))


def held_tools(data: CalibrationSet) -> Tools:
    """The ONNX path's simulation only: the plan's Q/DQ graph in ONNX Runtime on the held-back samples."""
    return Tools(simulate=lambda model, plan: run_model(apply_plan(model, plan), data.held_batches))


def _tools(data: CalibrationSet, config: QuantConfig, spec: PrecisionSpec, bar) -> Tools:
    """The ONNX path's simulation (the plan's Q/DQ graph in ONNX Runtime on the held-back samples), calibration
    (for a method that changes the graph before placement) and the plan placement starts from."""
    def calibrate(model: ir.Model) -> tuple[placement.Analysis, QuantPlan, str | None]:
        scratch: dict[str, Any] = {}
        analysis, full, _ = _calibrated(model, data, config, spec, scratch, bar)
        return analysis, full, scratch["cache"]

    return Tools(simulate=held_tools(data).simulate, calibrate=calibrate,
                 start_plan=lambda analysis, full: _start_plan(spec.candidates(analysis), full, config))


def _place(state: State, report: dict) -> State:
    """``state`` at its plan: the rules' decisions, or measured placement against the budget (placement="auto"),
    which measures the weights the ``start_plan`` methods (learned rounding) gave the plan it starts from."""
    spec, config, data = state.spec, state.config, state.data
    base = _start_plan(spec.candidates(state.analysis), state.full, config)
    state = replace(state, plan=base, sim_out=None)
    if config.placement != "auto":
        return state
    original = state.model
    state, _ = run_stage("start_plan", state, report)
    # Ranked on the held-back samples; the budget is checked on every sample (calibration and held
    # back: more samples, a tighter confidence bound), before bias correction.
    held = data.held_batches
    plan, ranking, placed = sensitivity.auto_place(state.model, base, spec.candidates(state.analysis), held,
                                                   state.budget, progress=state.progress,
                                                   check_batches=data.calib_batches + held)
    report["sensitivity"] = ranking
    report["auto_placement"] = {"budget_at_placement": state.budget.record(placed["measured"], placed["bounds"]),
                                "samples": placed["samples"], "checks": placed["checks"],
                                "readmitted": placed["readmitted"]}
    return replace(state, plan=plan, sim_out=None,
                   model=adaround.restore_weights(state.model, original, base, plan))


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
    report = _settings(config, task, data, spec)
    with progress_bar(progress) as bar:
        ref_out = run_model(model, data.held_batches)
        state = State("onnx", model, None, data, config, spec, budget, task, ref_out, _tools(data, config, spec, bar),
                      reference=model, progress=bar)
        state, _ = run_stage("graph", state, report)  # SmoothQuant: the graph calibrated is the smoothed one
        analysis, full, data_sha = _calibrated(state.model, data, config, spec, report, bar)
        state = replace(state, analysis=analysis, full=full, cache=report["cache"],
                        plan=_start_plan(spec.candidates(analysis), full, config))
        state, _ = run_stage("calibrated", state, report)  # equalization: placement="auto" searches on it
        state = _place(state, report)
        state, _ = run_stage("placed", state, report)  # AWQ-lite, GPTQ, learned rounding (rules' placement)
        state, _ = run_stage("finished", measured(state), report)  # bias correction, then fine-tuning
        state = measured(state)
    model, plan, sim_out = state.model, state.plan, state.sim_out
    _finish_report(report, config, budget, plan, len(spec.candidates(state.analysis).candidates), ref_out, sim_out,
                   model, data_sha)
    if progress:
        print_report(report)
    sim = apply_plan(model, plan)
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
    require_candidates(spec, analysis)
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
