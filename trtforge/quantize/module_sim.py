"""The direct path's INT8 simulation of a PyTorch module: ``simulated``, ``run_module``, ``corrected_copy``.

The simulation is PyTorch's fake quantization of exactly what the converters emit (``convert.int8``):
each planned layer's input per tensor and its weight per output channel, through quantize → dequantize
with the plan's scales; forward hooks swap each layer's float output for its simulated one. Bias
correction (``corrected_copy``) follows ``methods.bias_correction`` on the ONNX path: under the simulation, each
layer's own mean per-channel shift (its simulated output minus its float output on the same input) is subtracted
from its bias, in a copy of the module (the caller's module is never changed).

Example:
    >>> with simulated(model, plan):
    ...     outputs = run_module(model, ["x"], held_batches)
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch

from trtforge.core.quant_plan import QuantLayer, QuantPlan
from trtforge.quantize.data import Batches


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


def simulated_outputs(model: torch.nn.Module, input_names: Sequence[str], plan: QuantPlan,
                      batches: Batches) -> list[np.ndarray]:
    """``run_module`` of ``model`` under the plan's simulation."""
    with simulated(model, plan):
        return run_module(model, input_names, batches)
