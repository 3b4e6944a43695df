"""INT8 for the direct path: calibrate a PyTorch module's Conv/Linear inputs, then place the layers.

The ONNX path observes tensors of the ONNX graph; the direct path has no ONNX graph, so forward
pre-hooks on every ``nn.Conv1d/2d/3d`` and ``nn.Linear`` stream each layer's input into the same
``observers.Histogram``, and the same ``calibrators.calibrate`` turns it into an amax
(``QuantConfig.calibrator``: mse, percentile, entropy or max). Weights get the same per-output-channel
absmax scales (``calibrators.weight_scales``). Placement is ``placement.decide`` on candidates made
from the modules, so ``include``/``exclude`` and the default rules (input channels a multiple of 32,
the final head in FP16) mean what they mean on the ONNX path; the module path is the label a
pattern searches (``exclude=[r"classifier"]``). Not here: attention MatMuls between two activations,
transposed convolutions, SmoothQuant, bias correction and auto placement.

Example:
    >>> plan = calibrate_module(model, ["x"], samples, QuantConfig(calibrator="percentile"))
    >>> plan.int8_modules()["features.1.conv"]      # (input scale, per-channel weight scales)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np
import torch

from trtforge.core.config import QuantConfig
from trtforge.passes.qdq import fp16_scales
from trtforge.quantize.calibrators import INT8_MAX, calibrate, weight_scales
from trtforge.quantize.data import batches
from trtforge.quantize.observers import Histogram
from trtforge.quantize.placement import Analysis, Candidate, decide

#: Module types the direct path quantizes → the ONNX op type a pattern names (a Linear on a rank-3+
#: input exports as MatMul, on a matrix as Gemm).
MODULE_OPS: dict[type, str] = {torch.nn.Conv1d: "Conv", torch.nn.Conv2d: "Conv", torch.nn.Conv3d: "Conv",
                               torch.nn.Linear: "Gemm"}


@dataclass(frozen=True)
class ModuleQuantPlan:
    """Per module path: the input amax, the FP16-representable scales, and the placement decision
    (None: INT8; else why it stays in the float type). Read-only mappings, computed once."""

    input_scales: Mapping[str, float]
    weight_scales: Mapping[str, tuple[float, ...]]
    decisions: Mapping[str, str | None]
    calibrator: str
    samples: int

    def int8_modules(self) -> dict[str, tuple[float, tuple[float, ...]]]:
        """Module path → (input scale, weight scales) of every layer placed in INT8."""
        return {path: (self.input_scales[path], self.weight_scales[path])
                for path, reason in self.decisions.items() if reason is None}

    def excluded(self) -> list[dict[str, str]]:
        """``{"layer", "reason"}`` for each layer kept in the float type (the sidecar's form)."""
        return [{"layer": path, "reason": reason} for path, reason in self.decisions.items() if reason]


@dataclass
class _Observed:
    """What the hooks saw of one module: its input histogram, input rank and call order."""

    histogram: Histogram
    rank: int
    order: int


def _observe(model: torch.nn.Module, input_names: Sequence[str], samples: Sequence[dict[str, np.ndarray]],
             config: QuantConfig) -> dict[str, _Observed]:
    """Run ``model`` on the samples in batches; histogram every quantizable module's input."""
    seen: dict[str, _Observed] = {}

    def hook_for(path: str):
        def hook(_module, args):
            x = args[0].detach()
            if path not in seen:
                seen[path] = _Observed(Histogram(config.num_bins), x.dim(), len(seen))
            seen[path].histogram.update(x.float().cpu().numpy())
        return hook

    handles = [module.register_forward_pre_hook(hook_for(path)) for path, module in model.named_modules()
               if type(module) in MODULE_OPS]
    try:
        with torch.no_grad():
            for feed in batches(samples, config.batch_size):
                model(*(torch.from_numpy(np.asarray(feed[name])) for name in input_names))
    finally:
        for handle in handles:
            handle.remove()
    return seen


def _candidate(path: str, module: torch.nn.Module, observed: _Observed, head: bool) -> Candidate:
    op = MODULE_OPS[type(module)]
    if op == "Gemm" and observed.rank > 2:
        op = "MatMul"
    groups = int(getattr(module, "groups", 1))
    in_channels = int(module.in_channels) if op == "Conv" else None
    return Candidate(node=path, output=path, op_type=op, label=path, activations=((0, path),),
                     weight=(1, f"{path}.weight", 0), in_channels=in_channels, is_head=head, groups=groups)


def calibrate_module(model: torch.nn.Module, input_names: Sequence[str], samples: Sequence[dict[str, np.ndarray]],
                     config: QuantConfig) -> ModuleQuantPlan:
    """Observe ``model`` on ``samples`` (one-sample feeds by input name), calibrate, and place.

    A module the samples never reach is not a candidate; the head is the last module called.
    """
    model = model.eval()
    seen = _observe(model, input_names, samples, config)
    modules = dict(model.named_modules())
    last = max(seen.values(), key=lambda o: o.order).order if seen else -1
    candidates = tuple(_candidate(path, modules[path], obs, obs.order == last) for path, obs in
                       sorted(seen.items(), key=lambda item: item[1].order))
    decisions = decide(Analysis(candidates, (), ()), exclude=config.exclude, include=config.include)
    inputs = {path: fp16_scales([calibrate(obs.histogram, config.calibrator, config.percentile) / INT8_MAX])[0]
              for path, obs in seen.items()}
    weights = {path: fp16_scales(weight_scales(modules[path].weight.detach().float().numpy(), 0)) for path in seen}
    return ModuleQuantPlan(MappingProxyType(inputs), MappingProxyType(weights), MappingProxyType(decisions),
                           config.calibrator, len(samples))
