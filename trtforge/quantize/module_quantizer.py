"""INT8 post-training quantization of a PyTorch module (the direct path): ``quantize_module``.

The steps of ``quantizer.quantize_model`` (the ONNX path), in PyTorch: split the samples (the last
``holdout`` share held back), calibrate into a ``QuantPlan`` (``module_calibration``), simulate the plan,
correct the biases (optional, kept only when it helps: ``bias_correction.verdict``), and the report on
the held-back samples (``report.finish_report``), so the sidecar's quantization record has the same keys
on both paths.

The simulation is PyTorch's fake quantization of exactly what the converters emit (``convert.int8``):
each planned layer's input per tensor and its weight per output channel, through quantize → dequantize
with the plan's scales; forward hooks swap each layer's float output for its simulated one. Bias
correction follows ``bias_correction`` on the ONNX path: under the simulation, each layer's own mean
per-channel shift (its simulated output minus its float output on the same input) is subtracted from its
bias, in a copy of the module (the caller's module is never changed).

Example:
    >>> result = quantize_module(model, ["x"], samples, QuantConfig(calibrator="max"))
    >>> result.plan.layer("fc").activation.scales, result.report["bias_correction"]["applied"]
    ((0.0123,), True)
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from trtforge.core.budget import resolve_budget
from trtforge.core.config import QuantConfig, check_quant_options
from trtforge.core.errors import InvalidArgument
from trtforge.core.quant_plan import QuantLayer, QuantPlan
from trtforge.quantize.calibration import split_loaded
from trtforge.quantize.data import Batches, data_hash
from trtforge.quantize.methods import bias_correction
from trtforge.quantize.module_calibration import calibrate_module
from trtforge.quantize.report import finish_report, print_report, settings_report
from trtforge.quantize.task import task_of_outputs


@dataclass(frozen=True)
class ModuleQuantResult:
    """The module to lower (the caller's, or a bias-corrected copy), its INT8 plan, and the report."""

    model: torch.nn.Module
    plan: QuantPlan
    report: dict[str, Any]


def _fake_output(module: torch.nn.Module, layer: QuantLayer, x: torch.Tensor) -> torch.Tensor:
    """``module(x)`` with its input and weight on the plan's INT8 grids (the converters' Q/DQ pairs)."""
    xq = torch.fake_quantize_per_tensor_affine(x.float(), layer.activation.scales[0], 0, -128, 127)
    scales = torch.tensor(layer.weight.scales, dtype=torch.float32)
    wq = torch.fake_quantize_per_channel_affine(module.weight.float(), scales, torch.zeros(len(scales), dtype=torch.int32),
                                                0, -128, 127)
    if isinstance(module, torch.nn.Linear):
        return torch.nn.functional.linear(xq, wq, module.bias)
    return module._conv_forward(xq, wq, module.bias)


@contextlib.contextmanager
def simulated(model: torch.nn.Module, plan: QuantPlan, shifts: dict[str, list] | None = None) -> Iterator[None]:
    """While open, each planned layer of ``model`` outputs its INT8 simulation; with ``shifts``, each call
    adds its per-channel (sum of simulated − float output, count) under the layer's path."""
    modules = dict(model.named_modules())

    def hook_for(layer: QuantLayer):
        def hook(module, args, output):
            out = _fake_output(module, layer, args[0])
            if shifts is not None:
                axis = -1 if isinstance(module, torch.nn.Linear) else 1
                diff = torch.movedim((out - output).double(), axis, -1).reshape(-1, out.shape[axis])
                total = shifts.setdefault(layer.output, [0.0, 0])
                total[0], total[1] = total[0] + diff.sum(0).numpy(), total[1] + diff.shape[0]
            return out
        return hook

    handles = [modules[layer.output].register_forward_hook(hook_for(layer)) for layer in plan.layers]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _flat(output: Any) -> list[torch.Tensor]:
    if isinstance(output, torch.Tensor):
        return [output]
    values = output.values() if isinstance(output, dict) else output
    return [t for value in values for t in _flat(value)]


def run_module(model: torch.nn.Module, input_names: Sequence[str], batches: Batches) -> list[np.ndarray]:
    """Every output of ``model`` over all batches, concatenated along the batch axis (FP32, numpy)."""
    outs: list[list[np.ndarray]] = []
    with torch.no_grad():
        for feed in batches:
            res = _flat(model(*(torch.from_numpy(np.asarray(feed[name])) for name in input_names)))
            outs = outs or [[] for _ in res]
            for i, r in enumerate(res):
                outs[i].append(np.atleast_1d(r.detach().float().cpu().numpy()))
    return [np.concatenate(o, axis=0) for o in outs]


def corrected_copy(model: torch.nn.Module, input_names: Sequence[str], plan: QuantPlan,
                   batches: Batches) -> tuple[torch.nn.Module, int]:
    """A copy of ``model`` whose biases absorb each planned layer's mean INT8 shift; the layers corrected."""
    shifts: dict[str, list] = {}
    with simulated(model, plan, shifts):
        run_module(model, input_names, batches)
    out = copy.deepcopy(model)
    modules = dict(out.named_modules())
    corrected = 0
    with torch.no_grad():
        for path, (total, count) in shifts.items():
            bias = modules[path].bias
            if bias is not None:  # no bias: nothing to correct (as on the ONNX path)
                bias -= torch.from_numpy(total / count).to(bias.dtype)
                corrected += 1
    return out, corrected


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
    with simulated(model, plan):
        sim_out = run_module(model, input_names, held)
    if config.bias_correction and plan.layers:
        corrected, layers = corrected_copy(model, input_names, plan, data.calib_batches)
        with simulated(corrected, plan):
            corrected_out = run_module(corrected, input_names, held)
        keep, report["bias_correction"] = bias_correction.verdict(ref_out, sim_out, corrected_out, budget, layers)
        if keep:
            model, sim_out = corrected, corrected_out
    finish_report(report, config, budget, plan, len(plan.layers) + len(plan.excluded), ref_out, sim_out)
    report["data_sha256"] = data_hash(data.calib)
    if progress:
        print_report(report)
    return ModuleQuantResult(model, plan, report)
