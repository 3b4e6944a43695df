"""Quantization-aware fine-tuning as a method of the flow (``trtforge.quantize.methods.distill`` does the work,
in PyTorch: imported only when the method runs).

It runs last: it starts from, and must beat, the finished (bias-corrected) graph on the held-back samples.
"""

from __future__ import annotations

from dataclasses import replace

from trtforge.quantize.method import Candidate, Method, Skipped, State


def _run(state: State) -> Candidate | Skipped:
    """The quantized layers' weights and biases fine-tuned under the plan's fake quantization, distilled from the
    FP32 graph on the calibration samples."""
    from trtforge.quantize.methods import distill  # torch: imported only when asked for

    if not state.plan.layers:
        return Skipped({"applied": False, "reason": "no quantized layer"})
    tuned, info = distill.finetune(state.model, state.plan, state.data.calib_batches, state.config.finetune_seconds,
                                   progress=state.progress, reference=state.reference)
    return Candidate(replace(state, model=tuned, sim_out=None), {"layers": info["weights"], **info})


#: INT8 W8A8 graphs only (``check_quant_options``).
METHOD = Method(name="finetune", stage="finished", keep="budget", run=_run,
                applies=lambda config, spec: config.finetune_seconds is not None)
