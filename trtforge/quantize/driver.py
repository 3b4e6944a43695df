"""The one driver of the quantization methods, for both paths: ``run_stage``.

At each stage of the flow it runs, in the order of ``trtforge.quantize.methods.METHODS``, every method that
applies; for each it times the method, measures the candidate on the held-back samples against the state the
method started from (relative L2 mean, and the error budget), keeps it or not by the method's keep rule,
writes the method's report entry (its typed record, ``MethodRecord``: ``applied``, ``rel_l2_before``,
``rel_l2_after``, then the method's own fields) and its ``MethodRow`` (the report's ``methods`` row), both the
sidecar's records (``trtforge.core.sidecar_records``).

Example:
    >>> state, runs = run_stage("finished", state, report)
    >>> [run.method for run in runs]
    ['bias_correction']
"""

from __future__ import annotations

import time
from dataclasses import replace

from trtforge.core.sidecar_records import MethodRow
from trtforge.quantize.method import Candidate, Keep, Method, Outputs, Skipped, Stage, State
from trtforge.quantize.methods import METHODS
from trtforge.quantize.report import compare_outputs


def simulated_outputs(state: State) -> Outputs:
    """The held-back outputs of ``state.model`` simulated at ``state.plan`` (measured once per state)."""
    return state.sim_out if state.sim_out is not None else state.tools.simulate(state.model, state.plan)


def measured(state: State) -> State:
    """``state`` with its simulation's held-back outputs."""
    if state.sim_out is not None:
        return state
    return replace(state, sim_out=simulated_outputs(state))


def verdict(reference_out: Outputs, before: Outputs, after: Outputs, budget, keep: Keep,
            changed: bool = True) -> tuple[bool, float, float]:
    """(keep?, relative L2 before, after) by the keep rule (``trtforge.quantize.method.KEEPS``). ``budget``:
    kept only when lower on the held-back samples (a method can hurt, e.g. bias correction where padding tokens
    dominate a channel mean) and when an error budget that held without it still holds."""
    rel_before = compare_outputs(reference_out, before)["rel_l2_mean"]
    rel_after = compare_outputs(reference_out, after)["rel_l2_mean"]
    if keep == "budget":
        kept = rel_after < rel_before and (budget.holds(budget.measure(reference_out, after))
                                           or not budget.holds(budget.measure(reference_out, before)))
    elif keep == "better":
        kept = changed and rel_after < rel_before
    else:  # not_worse
        kept = rel_after <= rel_before
    return kept, rel_before, rel_after


def _decide(method: Method, state: State, candidate: Candidate, start: float, report: dict) -> tuple[State, MethodRow]:
    """Measure ``candidate`` against ``state``, write the method's report entry; the state kept and the run."""
    before = simulated_outputs(state)
    after = candidate.outputs if candidate.outputs is not None else \
        state.tools.simulate(candidate.state.model, candidate.state.plan)
    kept, rel_before, rel_after = verdict(state.reference_out, before, after, state.budget, method.keep,
                                          candidate.changed)
    report[method.name] = method.record.from_dict({"applied": kept, "rel_l2_before": rel_before,
                                                   "rel_l2_after": rel_after, **candidate.record}).to_dict()
    run = MethodRow(method=method.name, applied=bool(kept), seconds=round(time.perf_counter() - start, 3),
                    held_back=compare_outputs(state.reference_out, after, classification=state.task == "classification"))
    if not kept:
        return replace(state, sim_out=before), run
    chosen = candidate.state
    if chosen.cache != state.cache:  # a graph calibrated again: the cache's answer for it
        report["cache"] = chosen.cache
    return replace(chosen, sim_out=after), run


def run_stage(stage: Stage, state: State, report: dict) -> tuple[State, tuple[MethodRow, ...]]:
    """Every method of ``stage`` that applies, in order, each kept or not: the state after them and their runs
    (whose rows are appended to ``report["methods"]``)."""
    runs: list[MethodRow] = []
    for method in METHODS:
        if method.stage_of(state.config) != stage or not method.applies(state.config, state.spec):
            continue
        start = time.perf_counter()
        candidate = method.run(state)
        if isinstance(candidate, Skipped):
            if candidate.record is not None:
                report[method.name] = method.record.from_dict(candidate.record).to_dict()
            continue
        if method.keep == "always":
            report[method.name] = method.record.from_dict(candidate.record).to_dict()
            state = candidate.state
            continue
        state, run = _decide(method, state, candidate, start, report)
        if method.row:
            runs.append(run)
            report.setdefault("methods", []).append(run.to_dict())
    return state, tuple(runs)
