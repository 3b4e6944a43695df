"""``precision="auto"``: per layer the cheapest precision every target GPU accelerates, within the error budget.

The caller hands in the ladder: for each op type, the precisions of ``core.config.AUTO_LADDER`` that every
build target accelerates (``builder.precision_plan.auto_ladder`` reads them from the capability table and
its probe builds), cheapest first; FP16 is every layer's top rung. A layer's rungs are the ones the
quantizer can give it (weight-only: MatMul/Gemm with a constant 2-D weight), minus ``exclude`` patterns.

One W8A8 type per graph: the first of FP8/INT8 the ladder names. ``QuantPlan`` could carry both (each input
has its own dtype), but by the capability table nothing is lost: wherever every target accelerates FP8 for
an op class, FP8 covers every class INT8 would (full TensorRT on sm89 and newer: both, for convolutions and
GEMMs; TensorRT-RTX: no W8A8 INT8), and each W8A8 type costs a calibration pass. So a graph mixes FP8 or
INT8 layers, weight-only INT8 GEMMs and FP16.

Placement reuses ``sensitivity.auto_place`` (its ranking, bisection and re-admission) in two steps, so that
moving every ranked group is known to hold, the premise of its bisection:

1. every layer at its most accurate quantized rung; the fewest most harmful groups move to FP16;
2. the rest at their cheapest rung; the fewest most harmful groups move back up to their step-1 rung
   (``fallback``), then each moved group is tried back down.

The result: the cheapest rung for every layer, the most sensitive moved up (cheapest → weight-only → FP16)
until the budget holds on the held-back samples (the one-sided 95 % bound of each metric's mean, so the mean
holds too); the report's ``error_budget`` is measured there on the final graph. Unlike ``placement="auto"``,
which checks on every sample for a tighter bound, the calibration samples play no part in the check.

Example:
    >>> result = quantize_auto(model, x, QuantConfig(error_budget=0.05), {"MatMul": ("fp8", "int8-wo")})
    >>> result.report["auto_precision"]["counts"]
    {'fp8': 2, 'int8-wo': 1, 'fp16': 1}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

import onnx
import onnx_ir as ir

from trtforge.core.config import AUTO_LADDER, AUTO_PRECISION, QuantConfig
from trtforge.core.preprocessing import PreprocessConfig
from trtforge.passes.qdq import QDQ_OPSET, QuantLayer, QuantPlan, apply_plan
from trtforge.quantize import placement, sensitivity
from trtforge.quantize.calibration import CalibrationSet, build_full_plan
from trtforge.quantize.data import data_hash
from trtforge.quantize.driver import measured, run_stage
from trtforge.quantize.method import State
from trtforge.quantize.placement import Analysis
from trtforge.quantize.precision import precision_of, spec_of
from trtforge.quantize.progress import progress_bar
from trtforge.quantize.quantizer import (
    QuantResult,
    _calibrate_cached,
    _checked_start,
    _finish_report,
    _settings,
    held_tools,
)
from trtforge.quantize.report import print_report, run_model

#: Where each precision stands on the ladder (0: cheapest).
RUNG: dict[str, int] = {p: i for i, rung in enumerate(AUTO_LADDER) for p in rung}
NO_RUNG = "no precision below FP16 that every target accelerates for {op}"


def graph_ladder(ladder: Mapping[str, Sequence[str]]) -> dict[str, tuple[str, ...]]:
    """``ladder`` (op type → accelerated precisions) in ladder order, with one W8A8 type for the whole graph.

    Example:
        >>> graph_ladder({"Conv": ("int8",), "MatMul": ("int8-wo", "fp8", "int8")})
        {'Conv': (), 'MatMul': ('fp8', 'int8-wo')}
    """
    w8a8 = next((p for p in AUTO_LADDER[0] if any(p in rungs for rungs in ladder.values())), None)
    return {op: tuple(sorted((p for p in rungs if p in RUNG and (p not in AUTO_LADDER[0] or p == w8a8)),
                             key=RUNG.__getitem__)) for op, rungs in ladder.items()}


def _rungs(analysis: Analysis, ladder: Mapping[str, tuple[str, ...]], layers: Mapping[str, Mapping[str, QuantLayer]],
           config: QuantConfig) -> tuple[dict[str, tuple[str, ...]], tuple[tuple[str, str], ...]]:
    """(layer output → the rungs it can take, cheapest first; (label, reason) of the layers left in FP16)."""
    decisions = placement.decide(analysis, config.exclude, config.include, rules=False)
    rungs, fp16 = {}, []
    for c in analysis.candidates:
        mine = tuple(p for p in ladder.get(c.op_type, ()) if c.output in layers[p])
        if decisions.get(c.output) or not mine:
            fp16.append((c.label, decisions.get(c.output) or NO_RUNG.format(op=c.op_type)))
        else:
            rungs[c.output] = mine
    return rungs, tuple(fp16)


def _restricted(analysis: Analysis, outputs: set[str]) -> Analysis:
    """``analysis`` with only the layers in ``outputs`` (the groups a placement step may move)."""
    blocks = tuple(b for b in (tuple(o for o in block if o in outputs) for block in analysis.attention_blocks) if b)
    return Analysis(tuple(c for c in analysis.candidates if c.output in outputs), blocks,
                    tuple(p for p in analysis.mlp_pairs if set(p) <= outputs))


def _plan(choice: Mapping[str, str], layers: Mapping[str, Mapping[str, QuantLayer]], base: QuantPlan) -> QuantPlan:
    """``base`` (its MAC total and excluded layers) with each output of ``choice`` in its chosen precision;
    its ``precision`` is the cheapest one it uses (the build's file names and tolerances)."""
    chosen = tuple(layers[p][o] for o, p in choice.items())
    used = sorted({precision_of(layer) for layer in chosen}, key=RUNG.__getitem__)
    return replace(base, layers=chosen, precision=used[0] if used else base.precision)


def _place(model: ir.Model, analysis: Analysis, rungs: Mapping[str, tuple[str, ...]],
           layers: Mapping[str, Mapping[str, QuantLayer]], base: QuantPlan, data: CalibrationSet, budget, report: dict,
           bar) -> QuantPlan:
    """The two measured steps (module docstring); the report gets the rankings and what each step moved."""
    held = data.held_batches  # ranked and checked on the held-back samples (the budget is promised there)
    top = _plan({o: r[-1] for o, r in rungs.items()}, layers, base)
    plan, ranking, info = sensitivity.auto_place(model, top, _restricted(analysis, set(rungs)), held, budget,
                                                 progress=bar)
    steps = [{"step": "most accurate quantized rung → FP16", "moved": [r["group"] for r in ranking if r["fp16"]],
              "checks": info["checks"]}]
    current = {layer.output: precision_of(layer) for layer in plan.layers}
    movable = {o for o, p in current.items() if rungs[o][0] != p}
    if movable:
        cheap = _plan({o: rungs[o][0] if o in movable else p for o, p in current.items()}, layers, plan)
        plan, more, info = sensitivity.auto_place(model, cheap, _restricted(analysis, movable), held, budget,
                                                  progress=bar, fallback=plan)
        steps.append({"step": "cheapest rung → one rung up", "moved": [r["group"] for r in more if r["fp16"]],
                      "checks": info["checks"]})
        ranking = ranking + more
    report["sensitivity"] = ranking
    report["auto_placement"] = {"budget_at_placement": budget.record(info["measured"], info["bounds"]),
                                "samples": info["samples"], "checks": sum(s["checks"] for s in steps),
                                "readmitted": info["readmitted"], "steps": steps}
    return _plan({layer.output: precision_of(layer) for layer in plan.layers}, layers, plan)


def _record(analysis: Analysis, ladder: Mapping[str, tuple[str, ...]], rungs: Mapping[str, tuple[str, ...]],
            plan: QuantPlan) -> dict:
    """The report's ``auto_precision`` block: the ladder, and per layer its cheapest rung and its choice."""
    chosen = {layer.output: precision_of(layer) for layer in plan.layers}
    rows = [{"layer": c.label, "output": c.output, "op": c.op_type, "cheapest": (rungs.get(c.output) or ("fp16",))[0],
             "precision": chosen.get(c.output, "fp16")} for c in analysis.candidates]
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["precision"]] = counts.get(row["precision"], 0) + 1
    return {"ladder": {op: list(r) for op, r in ladder.items()}, "counts": counts, "layers": rows}


def quantize_auto(
    fp32: ir.Model | onnx.ModelProto,
    calibration_data,
    config: QuantConfig,
    ladder: Mapping[str, Sequence[str]],
    preprocessing: PreprocessConfig | Mapping | None = None,
    progress: bool = True,
) -> QuantResult:
    """FP32 graph + calibration data + the targets' ladder → a plan mixing precisions within ``config``'s budget.

    ``ladder``: op type (Conv, ConvTranspose, Gemm, MatMul) → the precisions every target accelerates for it.
    ``config.error_budget`` is required (``check_quant_options``).
    """
    ladder = graph_ladder(ladder)
    used = [p for p in RUNG if any(p in rungs for rungs in ladder.values())]
    specs = {p: spec_of(p, config) for p in used}
    opset = max((spec.opset for spec in specs.values()), default=QDQ_OPSET)
    model, task, budget, data = _checked_start(fp32, calibration_data, config, preprocessing, AUTO_PRECISION, opset)
    report = {**_settings(config, task, data, spec_of(AUTO_LADDER[-1][0], config)), "placement": "auto (precision)"}
    data_sha = data_hash(data.calib)
    with progress_bar(progress) as bar:
        analysis = placement.analyse(model)
        fulls = {}
        for p, spec in specs.items():
            amax, shapes, data_sha = _calibrate_cached(model, analysis, data, config, spec, report, bar)
            fulls[p] = build_full_plan(model, analysis, amax, shapes, config.calibrator, spec)
        layers = {p: {layer.output: layer for layer in full.layers} for p, full in fulls.items()}
        rungs, fp16 = _rungs(analysis, ladder, layers, config)
        base = QuantPlan((), fp16, config.calibrator, next(iter(fulls.values())).total_macs if fulls else 0,
                         used[0] if used else AUTO_LADDER[-1][0])
        plan = _place(model, analysis, rungs, layers, base, data, budget, report, bar) if rungs else base
        ref_out = run_model(model, data.held_batches)
        state = State("onnx", model, plan, data, config, None, budget, task, ref_out, held_tools(data),
                      reference=model, progress=bar)
        state = measured(run_stage("finished", measured(state), report)[0])  # bias correction
        model, sim_out = state.model, state.sim_out
    sim = apply_plan(model, plan)
    report["precision"] = plan.precision
    _finish_report(report, config, budget, plan, len(analysis.candidates), ref_out, sim_out, model, data_sha)
    report["error_budget"]["used_by_placement"] = True
    report["auto_precision"] = _record(analysis, ladder, rungs, plan)
    if progress:
        print_report(report)
    return QuantResult(fp32=model, sim=sim, plan=plan, report=report, sensitivity=report.get("sensitivity", []))
