"""Where FP8's error comes from, and what trading the last MACs for FP16 buys (issue 21).

On one suite of ``bench/quant_accuracy.py`` (vit, convnext, ocr, minilm), ONNX Runtime CPU, FP8 against FP32
on the held-out evaluation data. Steps (comma-separated, default all):

* ``kinds``: the default FP8 plan with one kind of layer (Conv, MatMul with a weight, attention products,
  the head, the first layer) moved to FP16, and that kind alone in FP8; weights alone, activations alone;
* ``calib``: the ``max`` and ``percentile`` calibrators;
* ``headroom``: activation scales multiplied by k (k binades of log2 headroom above the calibrated range);
* ``alone``: each sensitivity group alone in FP8 (everything else FP16), on the evaluation data;
* ``combo``: the ``max`` calibrator, the attention products in FP16, then the scan at >= 90 %;
* ``scan``: each sensitivity group moved to FP16 alone, ranked on the calibration samples (relative L2 per
  share of MACs, not on the evaluation data), then the most harmful per MAC moved to FP16 while the plan
  keeps at least 90 / 85 / 80 % of Conv/GEMM MACs.

Bias correction follows the quantizer's verdict on the default plan and is recomputed for each plan.

Usage: python bench/repro/fp8_error_sources.py MODEL N_EVAL [STEPS] (writes /tmp/fp8b/MODEL_N_STEPS.json)
"""
import json
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))  # bench/, for quant_accuracy
from quant_accuracy import SUITES, run  # noqa: E402

from trtforge.core.config import QuantConfig
from trtforge.passes.graph import ensure_node_names, ensure_opset, fresh_ir, to_proto
from trtforge.passes.qdq import apply_plan
from trtforge.quantize import placement
from trtforge.quantize.calibration import split_samples
from trtforge.quantize.coverage import int8_coverage, mac_counts
from trtforge.quantize.methods.bias_correction import correct_biases
from trtforge.quantize.precision import spec_of
from trtforge.quantize.quantizer import quantize_model
from trtforge.quantize.report import per_sample_errors, run_model

#: ``auto`` step: budgets at the issue's target, in each task's metric (embedding: mean cosine; other: rel. L2).
AUTO_BUDGETS = {"minilm": (0.999, 0.998), "ocr": (0.05, 0.03), "vit": (0.001,), "convnext": (0.001,)}


def headroom(p, k: float):
    """``p`` with every activation scale multiplied by ``k`` (weights unchanged)."""
    return replace(p, layers=tuple(
        replace(layer, inputs=tuple(q if q.is_weight else replace(q, scales=tuple(v * k for v in q.scales))
                                    for q in layer.inputs)) for layer in p.layers))


def main() -> None:
    name, n_eval = sys.argv[1], int(sys.argv[2])
    steps = sys.argv[3].split(",") if len(sys.argv) > 3 else ["kinds", "calib", "headroom", "scan"]
    out_path = Path("/tmp/fp8b") / f"{name}_{n_eval}_{'-'.join(steps)}.json"
    out_path.parent.mkdir(exist_ok=True)
    suite = SUITES[name](Path(tempfile.mkdtemp()), n_eval)
    macs = mac_counts(suite.fp32, suite.evaluation[0])
    ref = run(suite.fp32, suite.evaluation)
    rows: list[dict] = []
    t = time.time()
    res = quantize_model(suite.fp32, suite.calib, QuantConfig(), progress=False, precision="fp8")
    bc_kept = bool(res.report.get("bias_correction", {}).get("applied"))
    print(f"quantized in {time.time() - t:.0f} s, bias correction kept: {bc_kept}", flush=True)
    plan = res.plan
    orig = ensure_node_names(ensure_opset(fresh_ir(suite.fp32), spec_of("fp8").opset))
    data = split_samples(orig, suite.calib, QuantConfig(), suite.preprocessing)
    analysis = placement.analyse(orig)
    cands = analysis.by_output()

    def evaluate(p, label, **extra):
        m = correct_biases(orig, p, data.calib_batches)[0] if bc_kept and p.layers else orig
        sim = to_proto(apply_plan(m, p))
        out = run(sim, suite.evaluation)
        _, cos = per_sample_errors(ref, out)
        record({"config": label, "bias_correction": bc_kept, "coverage": round(int8_coverage(sim, macs), 4),
                "cos_mean": float(cos.mean()), **suite.metrics(ref, out), **extra})

    def record(row: dict) -> None:
        rows.append(row)
        print(json.dumps(row), flush=True)
        out_path.write_text(json.dumps({"command": " ".join(sys.argv), "machine": "shared 2-core x86_64 CPU",
                                        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "rows": rows},
                                       indent=1))

    def kind(layer) -> str:
        c = cands[layer.output]
        if layer.weight is None:
            return "attention products"
        return "head" if c.is_head else c.op_type

    order = [c.output for c in analysis.candidates]
    kinds: dict[str, list[str]] = {}
    for layer in plan.layers:
        kinds.setdefault(kind(layer), []).append(layer.output)
    kinds["first layer"] = [min((layer.output for layer in plan.layers), key=order.index)]
    evaluate(plan, "fp8 default (mse)")
    if "kinds" in steps:
        for k, outs in kinds.items():
            share = sum(layer.macs for layer in plan.layers if layer.output in outs) / plan.total_macs
            evaluate(plan.without(outs, "diagnosis"), f"default, {k} in FP16", mac_share=share, n=len(outs))
            evaluate(plan.only(outs), f"only {k} in FP8", mac_share=share, n=len(outs))
        for half, keep in (("weights", True), ("activations", False)):
            layers = tuple(replace(layer, inputs=ins) for layer in plan.layers
                           if (ins := tuple(q for q in layer.inputs if q.is_weight == keep)))
            evaluate(replace(plan, layers=layers), f"{half} only in FP8")
    if "calib" in steps:
        for cal in ("max", "percentile"):
            r = quantize_model(suite.fp32, suite.calib, QuantConfig(calibrator=cal), progress=False, precision="fp8")
            evaluate(r.plan, f"fp8 {cal}")
    if "headroom" in steps:
        r = quantize_model(suite.fp32, suite.calib, QuantConfig(calibrator="max"), progress=False, precision="fp8")
        for cal, p, ks in (("mse", plan, (4,)), ("max", r.plan, (2, 8, 32))):
            for k in ks:
                evaluate(headroom(p, k), f"fp8 {cal}, activation scales x{k}")
    if "alone" in steps:  # each sensitivity group alone in FP8, the rest FP16: which single groups miss already
        for group, outs in analysis.groups():
            if outs := [o for o in outs if plan.layer(o)]:
                share = sum(plan.layer(o).macs for o in outs) / plan.total_macs
                evaluate(plan.only(outs), f"alone in FP8: {group}", mac_share=share)
    if "auto" in steps:  # placement="auto" with a budget at the target (its default budget is met by plain FP8)
        for budget in AUTO_BUDGETS[name]:
            t = time.time()
            r = quantize_model(suite.fp32, suite.calib, QuantConfig(placement="auto", error_budget=budget),
                               progress=False, precision="fp8")
            out = run(r.sim_model, suite.evaluation)
            _, cos = per_sample_errors(ref, out)
            row = {"config": f"placement='auto', error_budget={budget}", "coverage": round(int8_coverage(r.sim_model, macs), 4),
                   "cos_mean": float(cos.mean()), **suite.metrics(ref, out), "seconds": round(time.time() - t),
                   "budget_at_placement": r.report["auto_placement"]["budget_at_placement"]}
            record(row)
    if "scan" in steps:
        scan(res, plan, orig, analysis, data, evaluate)
    if "combo" in steps:  # the measured gains together: max calibrator, attention products FP16, then the scan
        r = quantize_model(suite.fp32, suite.calib, QuantConfig(calibrator="max"), progress=False, precision="fp8")
        products = [layer.output for layer in r.plan.layers if layer.weight is None]
        scan(r, r.plan.without(products, "combo"), orig, analysis, data, evaluate, (0.90,),
             "max calibrator, attention products in FP16, scan")


def scan(res, plan, orig, analysis, data, evaluate, floors=(0.90, 0.85, 0.80), label="scan") -> None:
    """Each group to FP16 alone, ranked on the calibration samples; then the best per MAC to FP16."""
    held = data.calib_batches
    href = run_model(orig, held)
    base = float(per_sample_errors(href, run_model(apply_plan(res.fp32, plan), held))[0].mean())
    ranking = []
    for group, outs in analysis.groups():
        outs = [o for o in outs if plan.layer(o)]
        if not outs:
            continue
        share = sum(plan.layer(o).macs for o in outs) / plan.total_macs
        err = float(per_sample_errors(href, run_model(apply_plan(res.fp32, plan.without(outs, "scan")), held))[0].mean())
        ranking.append({"group": group, "outs": outs, "share": share, "gain": base - err})
        print(f"{group[:60]:60s} share {share:.4f} rel. L2 {base:.4f} -> {err:.4f}", flush=True)
    ranking.sort(key=lambda r: -r["gain"] / max(r["share"], 1e-3))
    for floor in floors:
        drop, cov = [], plan.coverage
        for r in ranking:
            if r["gain"] > 0 and cov - r["share"] >= floor:
                drop += r["outs"]
                cov -= r["share"]
        evaluate(plan.without(drop, "scan"), f"{label}: most harmful per MAC in FP16, coverage >= {floor}",
                 dropped=len(drop), ranking=[{k: v for k, v in r.items() if k != "outs"} for r in ranking])


if __name__ == "__main__":
    main()
