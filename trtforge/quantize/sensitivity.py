"""Sensitivity: quantize one layer (or block) at a time and measure the output error.

``rank_groups`` runs the FP32 graph with a single group in INT8 (ONNX Runtime, FP32 scales) on
held-back samples and ranks groups by mean relative L2 of the outputs. ``auto_place`` keeps
the most harmful groups (error per share of MACs) in FP16, the fewest that bring the whole plan
within the task's error budget (``budget.py``; a bisection over the ranking, so only a handful of
full-graph checks run), then re-admits kept groups to INT8 where the budget still holds.

Example:
    >>> ranking = rank_groups(model, plan, analysis, held_batches)
    >>> ranking[0]["group"], ranking[0]["rel_l2"]
    ('_conv_stem', 0.041)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import onnx
import onnx_ir as ir

from trtforge.core.budget import ErrorBudget
from trtforge.core.config import QuantConfig
from trtforge.core.errors import WrongType
from trtforge.passes.graph import ensure_node_names, ensure_opset, fresh_ir
from trtforge.passes.qdq import QuantPlan, apply_plan
from trtforge.quantize import placement
from trtforge.quantize.calibration import build_full_plan, calibrate_model, split_samples
from trtforge.quantize.placement import Analysis
from trtforge.quantize.precision import require_candidates, spec_of
from trtforge.quantize.progress import progress_bar
from trtforge.quantize.report import per_sample_errors, run_model


def plan_error(model: ir.Model, plan: QuantPlan, batches, reference: list[np.ndarray]) -> float:
    """Mean relative L2 of the outputs of ``plan`` applied to ``model`` against ``reference``."""
    if not plan.layers:
        return 0.0
    rel, _ = per_sample_errors(reference, run_model(apply_plan(model, plan), batches))
    return float(rel.mean())


def rank_groups(
    model: ir.Model, plan: QuantPlan, analysis: Analysis, batches: Sequence[dict[str, np.ndarray]],
    progress=None, reference: list[np.ndarray] | None = None,
) -> list[dict]:
    """One row per group of the plan (attention block, MLP, layer), most harmful first."""
    reference = reference if reference is not None else run_model(model, batches)
    in_plan = {layer.output: layer for layer in plan.layers}
    groups = [(name, tuple(o for o in outs if o in in_plan)) for name, outs in analysis.groups()]
    groups = [(name, outs) for name, outs in groups if outs]
    task = progress.add_task("sensitivity", total=len(groups)) if progress is not None else None
    rows = []
    for name, outs in groups:
        err = plan_error(model, plan.only(outs), batches, reference)
        macs = sum(in_plan[o].macs for o in outs)
        rows.append({"group": name, "layers": list(outs), "macs": macs,
                     "mac_share": macs / plan.total_macs if plan.total_macs else 0.0, "rel_l2": err})
        if task is not None:
            progress.advance(task)
    rows.sort(key=lambda r: -r["rel_l2"])
    return rows


def auto_place(
    model: ir.Model, plan: QuantPlan, analysis: Analysis, batches: Sequence[dict[str, np.ndarray]],
    budget: ErrorBudget, progress=None, check_batches: Sequence[dict[str, np.ndarray]] | None = None,
    fallback: QuantPlan | None = None,
) -> tuple[QuantPlan, list[dict], dict]:
    """Keep the fewest most-harmful groups in FP16 so that ``budget`` holds on ``check_batches``.

    ``fallback`` (``precision="auto"``): the moved groups take its layers (a more accurate precision)
    instead of FP16; FP16 where it has none. Moving every group must make the budget hold.

    Groups are ranked on ``batches`` by relative L2 per share of MACs; a bisection over that ranking
    finds the shortest prefix to keep in FP16, then a re-admission pass tries each kept group back in
    INT8 (largest first) and keeps it there when the budget still holds. "Holds" means the one-sided
    95 % confidence bound of each metric's mean meets its limit (``ErrorBudget.bounds``), on
    ``check_batches`` (default: ``batches``). Returns the plan, the ranking (``fp16`` /
    ``readmitted`` per row) and the budget measured for the final plan.

    Example:
        >>> plan, ranking, info = auto_place(model, plan, analysis, held, ErrorBudget.of(cosine=0.99))
        >>> info["holds"], info["measured"]
        (True, {'cosine': 0.9931})
        >>> info["bounds"]
        {'cosine': 0.9912}
    """
    if not isinstance(budget, ErrorBudget):
        raise WrongType(f"budget must be an ErrorBudget (e.g. ErrorBudget.of(rel_l2=0.1)), got {budget!r}")
    reference = run_model(model, batches)
    ranking = rank_groups(model, plan, analysis, batches, progress, reference)
    check_batches = batches if check_batches is None else check_batches
    check_reference = run_model(model, check_batches)
    # Harm per MAC: among groups that hurt alike, the small ones go back to FP16 first, so the
    # budget is met while the most multiply-accumulates stay in INT8.
    ranking.sort(key=lambda r: -r["rel_l2"] / max(r["mac_share"], 1e-3))
    perfect = (budget.measure(check_reference, check_reference), budget.bounds(check_reference, check_reference))
    cache: dict[frozenset[int], tuple[dict[str, float], dict[str, float]]] = {}

    def plan_for(fp16_rows: frozenset[int]) -> QuantPlan:
        drop = [o for i in sorted(fp16_rows) for o in ranking[i]["layers"]]
        reason = "auto placement: among the most sensitive layers (measured)"
        return plan.without(drop, reason) if fallback is None else plan.replaced(drop, fallback, reason)

    def measured(fp16_rows: frozenset[int]) -> tuple[dict[str, float], dict[str, float]]:
        """(means, confidence bounds) of the budget's metrics with ``fp16_rows`` kept in FP16."""
        if fp16_rows not in cache:
            candidate = plan_for(fp16_rows)
            if not candidate.layers:
                cache[fp16_rows] = perfect
            else:
                out = run_model(apply_plan(model, candidate), check_batches)
                cache[fp16_rows] = (budget.measure(check_reference, out), budget.bounds(check_reference, out))
        return cache[fp16_rows]

    fp16, readmitted = _fewest(lambda rows: budget.holds(measured(rows)[1]), ranking)
    final_rows = frozenset(fp16)
    for i, row in enumerate(ranking):
        row["fp16"] = i in final_rows
        row["readmitted"] = ranking[i]["group"] in readmitted
    final = plan_for(final_rows)
    means, bounds = measured(final_rows)
    info = {"measured": means, "bounds": bounds, "holds": budget.holds(bounds), "checks": len(cache),
            "samples": len(check_reference[0]), "readmitted": readmitted}
    return final, ranking, info


def _fewest(holds: Callable[[frozenset[int]], bool], ranking: list[dict]) -> tuple[set[int], list[str]]:
    """(rows moved, groups re-admitted): the shortest prefix of ``ranking`` to move (a bisection; moving every
    row is taken to hold), then each moved row tried back, largest first, kept back where ``holds`` still."""
    def top(k: int) -> frozenset[int]:
        return frozenset(range(k))

    if holds(top(0)):
        best = 0
    else:
        lo, hi = 0, len(ranking)  # the budget fails at lo and holds at hi (everything FP16)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if holds(top(mid)):
                hi = mid
            else:
                lo = mid
        best = hi
    fp16 = set(top(best))
    readmitted: list[str] = []
    for i in sorted(fp16, key=lambda i: -ranking[i]["macs"]):
        trial = frozenset(fp16 - {i})
        if holds(trial):
            fp16, readmitted = set(trial), [*readmitted, ranking[i]["group"]]
    return fp16, readmitted


def sensitivity_table(
    model: ir.Model | onnx.ModelProto, calibration_data, config=None, preprocessing: dict | None = None,
    progress: bool = True, precision: str = "int8",
) -> list[dict]:
    """Calibrate ``model``, then rank every group by the error it causes alone in ``precision`` (held back).

    Example:
        >>> rows = sensitivity_table(onnx.load("m.onnx"), Path("calib/"), preprocessing=pp, precision="fp8")
        >>> rows[0]["group"]
    """
    config = config or QuantConfig()
    spec = spec_of(precision, config)
    model = ensure_node_names(ensure_opset(fresh_ir(model), spec.opset))
    everything = placement.analyse(model)
    analysis = require_candidates(spec, everything)  # before the data is read: one line, no traceback
    data = split_samples(model, calibration_data, config, preprocessing)
    rules = placement.decide(analysis, config.exclude, config.include, rules=spec.rules)
    with progress_bar(progress) as bar:
        amax, shapes = calibrate_model(model, everything, data.calib_batches, config, bar, spec)
        full = build_full_plan(model, everything, amax, shapes, config.calibrator, spec)
        rows = rank_groups(model, full, analysis, data.held_batches, progress=bar)
    for row in rows:
        reasons = {rules[o] for o in row["layers"] if rules.get(o)}
        row["default_rule"] = "; ".join(sorted(reasons)) if reasons else ""
    return rows


def print_sensitivity(rows: list[dict], limit: int | None = None, precision: str = "int8") -> None:
    """The ranking as a rich table, most harmful first."""
    from rich.console import Console
    from rich.table import Table

    name = spec_of(precision).name
    table = Table(title=f"{name} sensitivity: one layer/block in {name} at a time (held-back samples vs FP32)")
    for col, justify in (("#", "right"), ("layer / block", "left"), ("rel. L2", "right"), ("MACs", "right"),
                         ("default rule", "left")):
        table.add_column(col, justify=justify)
    for i, row in enumerate(rows[:limit] if limit else rows, start=1):
        table.add_row(str(i), row["group"], f"{row['rel_l2']:.5f}", f"{100 * row['mac_share']:.1f} %",
                      row.get("default_rule", ""))
    Console().print(table)
