"""Accuracy of a Q/DQ graph against its FP32 graph: relative L2, cosine, top-1/top-5 agreement.

Example:
    >>> ref, sim = run_model(fp32, batches), run_model(qdq_fp32, batches)
    >>> compare_outputs(ref, sim, classification=True)["top1_agreement"]
    0.97
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

from trtforge.core.budget import ErrorBudget
from trtforge.core.config import QuantConfig
from trtforge.core.metrics import batch_rows, carries_rows, per_sample_errors, rows_per_run, softmax
from trtforge.core.quant_plan import QuantPlan
from trtforge.passes.graph import ort_session
from trtforge.quantize.precision import spec_of


def run_model(model: ir.Model | onnx.ModelProto, batches: Sequence[dict[str, np.ndarray]], session=None) -> list[np.ndarray]:
    """Every graph output over all batches, one row per sample: concatenated along the batch axis.

    An output whose dim 0 is not the batch (a transposed ``(classes, N)``, a ``(K,)`` or a scalar) has no rows per
    sample: then every row is one batch run, each output of the run flattened (zeros pad a shorter run, which
    changes no norm or dot product the metrics take).

    Example:
        >>> [o.shape for o in run_model(mlp, [{"x": x[:3]}, {"x": x[3:]}])]  # outputs (N, 8) and (8, N)
        [(2, 24), (2, 24)]
    """
    if not batches:
        return []
    session = session or ort_session(model)
    may_batch = _may_carry_batch(session)
    runs = [[np.asarray(r, dtype=np.float32) for r in session.run(None, batch)] for batch in batches]
    rows = [batch_rows(batch) for batch in batches]
    outputs = [[run[i] for run in runs] for i in range(len(may_batch))]
    if all(may and carries_rows(out, rows) for may, out in zip(may_batch, outputs, strict=True)):
        return [np.concatenate(out, axis=0) for out in outputs]
    return [rows_per_run(out) for out in outputs]


def _may_carry_batch(session) -> list[bool]:
    """Per output, whether its declared dim 0 may be the batch: not a fixed size where the inputs' dim 0 is a name
    (or another fixed size). The runs then decide (not a scalar, dim 0 equal to the inputs')."""
    input_dims = {tuple(i.shape[:1]) for i in session.get_inputs() if i.shape}
    fixed = {d for (d,) in input_dims if isinstance(d, int)}
    named = len(fixed) < len(input_dims)

    def may(shape) -> bool:  # ONNX Runtime says [] for a scalar and for an unknown rank alike: the runs decide
        dim = shape[0] if shape else None
        return not isinstance(dim, int) or (not named and (not fixed or dim in fixed))

    return [may(o.shape) for o in session.get_outputs()]


def classification_metrics(ref_logits: np.ndarray, test_logits: np.ndarray) -> dict[str, float]:
    """top-1 agreement, top-5 overlap, and mean softmax KL(ref‖test)."""
    top1 = float(np.mean(ref_logits.argmax(-1) == test_logits.argmax(-1)))
    k = min(5, ref_logits.shape[-1])
    r5 = np.argsort(-ref_logits, axis=-1)[:, :k]
    t5 = np.argsort(-test_logits, axis=-1)[:, :k]
    overlap = float(np.mean([len(set(a) & set(b)) / k for a, b in zip(r5, t5, strict=True)]))
    p, q = softmax(ref_logits.astype(np.float64)), softmax(test_logits.astype(np.float64))
    kl = float(np.mean(np.sum(p * (np.log(np.maximum(p, 1e-30)) - np.log(np.maximum(q, 1e-30))), axis=-1)))
    top5_contains = float(np.mean([a[0] in b for a, b in zip(r5, t5, strict=True)]))
    return {"top1_agreement": top1, "top5_overlap": overlap, "top5_agreement": top5_contains, "softmax_kl": kl}


def compare_outputs(ref: list[np.ndarray], test: list[np.ndarray], classification: bool = False) -> dict[str, float]:
    rel, cos = per_sample_errors(ref, test)
    out = {"rel_l2_mean": float(rel.mean()), "rel_l2_max": float(rel.max()),
           "cosine_mean": float(cos.mean()), "cosine_min": float(cos.min()), "samples": int(rel.size)}
    if classification and ref[0].ndim == 2:
        out.update(classification_metrics(ref[0], test[0]))
    return out


def settings_report(config: QuantConfig, task: str, samples: tuple[int, int], precision: str,
                    block_size: int | None = None) -> dict[str, Any]:
    """The report's settings: what was asked for (``samples``: calibration, held back). Both paths start here."""
    return {
        "precision": precision,
        "calibrator": config.calibrator,
        "percentile": config.percentile if config.calibrator == "percentile" else None,
        "smoothquant_alpha": config.smoothquant,
        "bias_correction": config.bias_correction,
        "placement": config.placement,
        "rounding": config.rounding,
        "equalize": config.equalize,
        "finetune_seconds": config.finetune_seconds,
        "block_size": block_size,
        "task": task,
        "samples": {"calibration": samples[0], "held_back": samples[1]},
    }


def plan_summary(plan: QuantPlan, layers_total: int) -> dict[str, Any]:
    """What the report says of a plan: coverage, layer counts, and each layer kept in the float type."""
    return {"coverage": plan.coverage, "quantized_layers": len(plan.layers),
            "int8_layers": len(plan.layers),  # the INT8-era name of quantized_layers
            "layers_total": layers_total,
            "excluded_layers": [{"layer": label, "reason": reason} for label, reason in plan.excluded]}


def finish_report(report: dict, config: QuantConfig, budget: ErrorBudget, plan: QuantPlan, layers_total: int,
                  ref_out: list[np.ndarray], sim_out: list[np.ndarray]) -> None:
    """The measured part of the report (held-back samples, the final plan), shared by the ONNX and direct paths."""
    task = report["task"]
    report["measured"] = compare_outputs(ref_out, sim_out, classification=task == "classification")
    final = budget.measure(ref_out, sim_out)
    report["error_budget"] = {
        "source": "default" if config.error_budget is None else "error_budget=",
        "task": task, "description": budget.describe(), "holds": budget.holds(final),
        "used_by_placement": config.placement == "auto",
        "limits": budget.record(final),  # measured on the held-back samples, the final graph
    }
    report.update(plan_summary(plan, layers_total))


def _bias_text(info) -> str:
    if not info:
        return "off"
    if info is True:
        return "on"
    verdict = "applied" if info["applied"] else "not applied (did not help)"
    return f"{verdict}: rel L2 {info['rel_l2_before']:.4f} → {info['rel_l2_after']:.4f}"


def print_report(report: dict) -> None:
    """The report as a rich table (measured error, coverage, excluded layers)."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    name = spec_of(report.get("precision", "int8")).name
    measured = "ONNX Runtime, held-back samples vs FP32" if report["measured"] else "no calibration data: not measured"
    table = Table(title=f"{name} quantization report ({measured})")
    table.add_column("item")
    table.add_column("value", justify="right")
    alpha = report.get("smoothquant_alpha")
    rows = [
        ("calibrator", report["calibrator"] + (f" ({report['percentile']})" if report.get("percentile") else "")),
        ("SmoothQuant α", "off" if alpha is None else f"{alpha:g}"),
        ("bias correction", _bias_text(report.get("bias_correction"))),
        ("placement", report["placement"]),
        ("samples (calibration / held back)", f"{report['samples']['calibration']} / {report['samples']['held_back']}"),
        (f"{name} layers", f"{report['int8_layers']} of {report['layers_total']}"),
        (f"{name} coverage (MACs)", f"{100 * report['coverage']:.1f} %"),
    ]
    if report.get("auto_precision"):  # precision="auto": layers per precision it chose
        counts = report["auto_precision"]["counts"]
        rows.append(("precision auto (layers)", ", ".join(f"{p}: {n}" for p, n in counts.items())))
    if report.get("awq"):
        awq = report["awq"]
        rows.append(("AWQ-lite", f"{'applied' if awq['applied'] else 'not applied (did not help)'}: rel L2 "
                                 f"{awq['rel_l2_before']:.4f} → {awq['rel_l2_after']:.4f}"))
    if report.get("equalization"):
        eq = report["equalization"]
        rows.append(("equalization", "no Conv → ReLU/ReLU6 → Conv pair" if not eq["pairs"] else
                     f"{'applied' if eq['applied'] else 'not applied (did not help)'} ({eq['pairs']} pairs, "
                     f"bias absorption {eq['absorption']}): rel L2 {eq['rel_l2_before']:.4f} → "
                     f"{eq['rel_l2_after']:.4f}"))
    if report.get("learned_rounding"):
        lr = report["learned_rounding"]
        rows.append(("learned rounding", f"{'applied' if lr['applied'] else 'not applied (did not help)'}: rel L2 "
                                         f"{lr['rel_l2_before']:.4f} → {lr['rel_l2_after']:.4f}"))
    if report.get("gptq"):
        g = report["gptq"]
        rows.append(("GPTQ", f"{'applied' if g['applied'] else 'not applied (did not help)'} to {g['layers']} layers: "
                             f"rel L2 {g['rel_l2_before']:.4f} → {g['rel_l2_after']:.4f}"))
    if report.get("finetune") and "steps" in report["finetune"]:
        ft = report["finetune"]
        rows.append(("fine-tuning", f"{'applied' if ft['applied'] else 'not applied (did not help)'} ({ft['steps']} "
                                    f"steps): rel L2 {ft['rel_l2_before']:.4f} → {ft['rel_l2_after']:.4f}"))
    for method in report.get("methods", []):
        rows.append((f"time: {method['method'].replace('_', ' ')}", f"{method['seconds']:.1f} s"))
    m = report["measured"] or {}
    if not m:  # weight-only without calibration data: nothing to measure against
        rows.append(("calibration data", report.get("calibration_data") or "none"))
    else:
        rows += [("relative L2 (mean / max)", f"{m['rel_l2_mean']:.4f} / {m['rel_l2_max']:.4f}"),
                 ("cosine (mean / min)", f"{m['cosine_mean']:.5f} / {m['cosine_min']:.5f}")]
    if "top1_agreement" in m:
        rows += [("top-1 agreement", f"{m['top1_agreement']:.3f}"), ("top-5 overlap", f"{m['top5_overlap']:.3f}"),
                 ("softmax KL", f"{m['softmax_kl']:.4f}")]
    budget = report.get("error_budget")
    if isinstance(budget, dict):
        verdict = "holds" if budget["holds"] else "MISSED"
        values = ", ".join(f"{x['measured']:.4g}" for x in budget["limits"])
        rows.append((f"error budget ({budget['task']}, {budget['source']})", f"{budget['description']}: {values}, {verdict}"))
    for k, v in rows:
        table.add_row(k, v)
    console.print(table)
    if report.get("excluded_layers"):
        ex = Table(title="layers kept in FP16")
        ex.add_column("layer")
        ex.add_column("reason")
        for item in report["excluded_layers"]:
            ex.add_row(item["layer"], item["reason"])
        console.print(ex)
