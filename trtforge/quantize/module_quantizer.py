"""INT8 post-training quantization of a PyTorch module (the direct path): ``quantize_module``.

The steps of ``quantizer.quantize_model`` (the ONNX path), in PyTorch: split the samples (the last
``holdout`` share held back), calibrate into a ``QuantPlan`` (``module_calibration``), simulate the plan
(``module_sim``), run the methods that apply to a module through the one driver (``driver.run_stage``: bias
correction, kept only when it helps), and the report on the held-back samples (``report.finish_report``), so
the sidecar's quantization record has the same keys on both paths.

Example:
    >>> result = quantize_module(model, ["x"], samples, QuantConfig(calibrator="max"))
    >>> result.plan.layer("fc").activation.scales, result.report["bias_correction"]["applied"]
    ((0.0123,), True)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from trtforge.core.budget import resolve_budget
from trtforge.core.config import QuantConfig, check_quant_options
from trtforge.core.errors import InvalidArgument
from trtforge.core.quant_plan import QuantPlan
from trtforge.quantize.calibration import split_loaded
from trtforge.quantize.data import data_hash
from trtforge.quantize.driver import measured, run_stage
from trtforge.quantize.method import State, Tools
from trtforge.quantize.module_calibration import calibrate_module
from trtforge.quantize.module_sim import run_module, simulated_outputs
from trtforge.quantize.report import finish_report, print_report, settings_report
from trtforge.quantize.task import task_of_outputs


@dataclass(frozen=True)
class ModuleQuantResult:
    """The module to lower (the caller's, or a bias-corrected copy), its INT8 plan, and the report."""

    model: torch.nn.Module
    plan: QuantPlan
    report: dict[str, Any]


def _checked(config: QuantConfig) -> None:
    """The options the direct path has no use for, refused in one line before any work."""
    check_quant_options(config, "int8")
    if config.rounding != "nearest":
        raise InvalidArgument(f"the direct path's INT8 rounds weights to nearest; drop rounding={config.rounding!r} "
                              f"(--rounding {config.rounding}), or build with path='onnx' (--path onnx)")
    if config.smoothquant is not None or config.placement == "auto" or config.equalize:
        raise InvalidArgument("the direct path's INT8 has no SmoothQuant, equalization or auto placement; drop "
                              "smoothquant= (--smoothquant), equalize=True (--equalize) and placement='auto' "
                              "(--placement auto), or build with path='onnx' (--path onnx)")
    if config.finetune_seconds is not None:
        raise InvalidArgument("the direct path's INT8 has no fine-tuning; drop finetune_seconds= (--finetune-seconds), "
                              "or build with path='onnx' (--path onnx)")


def quantize_module(model: torch.nn.Module, input_names: Sequence[str], samples: list[dict[str, np.ndarray]],
                    config: QuantConfig, progress: bool = False) -> ModuleQuantResult:
    """Calibrate, place, bias-correct and measure ``model`` (eval mode) on one-sample feeds by input name."""
    _checked(config)
    data = split_loaded(samples, config.batch_size, config)
    model = model.eval()
    plan = calibrate_module(model, input_names, data.calib, config)
    held = data.held_batches
    ref_out = run_module(model, input_names, held)
    task = task_of_outputs([np.asarray(held[0][name]) for name in input_names], ref_out, config.task)
    budget = resolve_budget(task, config.error_budget)
    report = settings_report(config, task, (len(data.calib), len(data.holdout)), "int8")
    names = tuple(input_names)
    tools = Tools(simulate=lambda module, p: simulated_outputs(module, names, p, held))
    state = State("direct", model, plan, data, config, None, budget, task, ref_out, tools, reference=model,
                  input_names=names)
    state, _ = run_stage("finished", measured(state), report)  # bias correction (the only method it has)
    model, sim_out = state.model, measured(state).sim_out
    finish_report(report, config, budget, plan, len(plan.layers) + len(plan.excluded), ref_out, sim_out)
    report["data_sha256"] = data_hash(data.calib)
    if progress:
        print_report(report)
    return ModuleQuantResult(model, plan, report)
