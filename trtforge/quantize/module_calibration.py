"""INT8 for the direct path: calibrate a PyTorch module's Conv/Linear inputs into the one ``QuantPlan``.

The ONNX path observes tensors of the ONNX graph; the direct path has no ONNX graph, so forward
hooks on every ``nn.Conv1d/2d/3d`` and ``nn.Linear`` stream each layer's input into the same
``observers.Histogram``, and the same ``calibrators.calibrate`` turns it into an amax
(``QuantConfig.calibrator``: mse, percentile, entropy or max). Weights get the same per-output-channel
absmax scales (``calibrators.weight_scales``). Placement is ``placement.decide`` on candidates made
from the modules, so ``include``/``exclude`` and the default rules (input channels a multiple of 32,
the final head in FP16) mean what they mean on the ONNX path; the module path is the label a
pattern searches (``exclude=[r"classifier"]``). The result is a ``QuantPlan`` like the ONNX path's:
each layer addressed and labelled by its module path (as ``named_modules`` spells it), with the
activation's per-tensor scale and the weight's per-output-channel scales (axis 0 of the torch weight).
Not here: attention MatMuls between two activations, transposed convolutions, SmoothQuant and auto
placement. Bias correction and the held-back report: ``quantize.module_quantizer``.

Example:
    >>> plan = calibrate_module(model, ["x"], samples, QuantConfig(calibrator="percentile"))
    >>> plan.layer("features.1.conv").weight.scales[:2]      # per-channel weight scales
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from trtforge.core.config import QuantConfig
from trtforge.core.quant_plan import QuantInput, QuantLayer, QuantPlan, fp16_scales
from trtforge.quantize.calibration import plan_from_decisions
from trtforge.quantize.calibrators import INT8_MAX, calibrate, weight_scales
from trtforge.quantize.data import batches
from trtforge.quantize.observers import Histogram, warn_nonfinite
from trtforge.quantize.placement import Analysis, Candidate, decide

#: Module types the direct path quantizes → the ONNX op type a pattern names (a Linear on a rank-3+
#: input exports as MatMul, on a matrix as Gemm).
MODULE_OPS: dict[type, str] = {torch.nn.Conv1d: "Conv", torch.nn.Conv2d: "Conv", torch.nn.Conv3d: "Conv",
                               torch.nn.Linear: "Gemm"}


@dataclass
class _Observed:
    """What the hooks saw of one module: its input histogram, input rank, call order and output shape."""

    histogram: Histogram
    rank: int
    order: int
    output_shape: tuple[int, ...]


def _observe(model: torch.nn.Module, input_names: Sequence[str], samples: Sequence[dict[str, np.ndarray]],
             config: QuantConfig) -> dict[str, _Observed]:
    """Run ``model`` on the samples in batches; histogram every quantizable module's input."""
    seen: dict[str, _Observed] = {}

    def hook_for(path: str):
        def hook(_module, args, output):
            x = args[0].detach()
            if path not in seen:
                seen[path] = _Observed(Histogram(config.num_bins), x.dim(), len(seen), tuple(output.shape))
            seen[path].histogram.update(x.float().cpu().numpy())
        return hook

    handles = [module.register_forward_hook(hook_for(path)) for path, module in model.named_modules()
               if type(module) in MODULE_OPS]
    try:
        with torch.no_grad():
            for feed in batches(samples, config.batch_size):
                model(*(torch.from_numpy(np.asarray(feed[name])) for name in input_names))
    finally:
        for handle in handles:
            handle.remove()
    warn_nonfinite({path: observed.histogram for path, observed in seen.items()})
    return seen


def _candidate(path: str, module: torch.nn.Module, observed: _Observed, head: bool) -> Candidate:
    op = MODULE_OPS[type(module)]
    if op == "Gemm" and observed.rank > 2:
        op = "MatMul"
    groups = int(getattr(module, "groups", 1))
    in_channels = int(module.in_channels) if op == "Conv" else None
    return Candidate(node=path, output=path, op_type=op, label=path, activations=((0, path),),
                     weight=(1, f"{path}.weight", 0), in_channels=in_channels, is_head=head, groups=groups)


def _macs(module: torch.nn.Module, observed: _Observed) -> int:
    """Per-sample multiply-accumulates (as ``quantize.macs`` counts them on the ONNX path)."""
    out = observed.output_shape
    per_sample = int(np.prod(out[1:])) if len(out) > 1 else int(np.prod(out))
    return per_sample * int(np.prod(module.weight.shape[1:]))


def _layer(path: str, module: torch.nn.Module, observed: _Observed, op_type: str, config: QuantConfig) -> QuantLayer:
    """The plan layer of one module: its input's per-tensor scale, its weight's per-output-channel scales."""
    act = fp16_scales([calibrate(observed.histogram, config.calibrator, config.percentile) / INT8_MAX])
    weight = fp16_scales(weight_scales(module.weight.detach().float().numpy(), 0))
    return QuantLayer(path, op_type, path, (QuantInput(0, path, act),
                                            QuantInput(1, f"{path}.weight", weight, axis=0, is_weight=True)),
                      _macs(module, observed))


def calibrate_module(model: torch.nn.Module, input_names: Sequence[str], samples: Sequence[dict[str, np.ndarray]],
                     config: QuantConfig) -> QuantPlan:
    """Observe ``model`` on ``samples`` (one-sample feeds by input name), calibrate, and place: the INT8 plan.

    A module the samples never reach is not a candidate; the head is the last module called. The layers
    placed in the float type are the plan's ``excluded`` (module path, reason).
    """
    model = model.eval()
    seen = _observe(model, input_names, samples, config)
    modules = dict(model.named_modules())
    last = max(seen.values(), key=lambda o: o.order).order if seen else -1
    ordered = sorted(seen.items(), key=lambda item: item[1].order)
    candidates = tuple(_candidate(path, modules[path], obs, obs.order == last) for path, obs in ordered)
    decisions = decide(Analysis(candidates, (), ()), exclude=config.exclude, include=config.include)
    layers = tuple(_layer(path, modules[path], obs, c.op_type, config)
                   for (path, obs), c in zip(ordered, candidates, strict=True))
    full = QuantPlan(layers, (), config.calibrator, sum(layer.macs for layer in layers), "int8")
    return plan_from_decisions(full, decisions)
