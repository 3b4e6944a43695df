"""Calibration: split the samples, observe the activations, and the full plan every placement starts from.

Example:
    >>> data = split_samples(model, Path("calib/"), QuantConfig(), preprocessing=pp)
    >>> amax, shapes = calibrate_model(model, analyse(model), data.calib_batches, QuantConfig())
    >>> full = build_full_plan(model, analyse(model), amax, shapes, "mse", spec_of("fp8"))
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np
import onnx_ir as ir

from trtforge.core.config import QuantConfig
from trtforge.core.preprocessing import PreprocessConfig
from trtforge.passes.graph import constant_value, input_specs, values_by_name
from trtforge.passes.index_ranges import index_overflow
from trtforge.passes.qdq import QuantInput, QuantLayer, QuantPlan, fp16_scales
from trtforge.quantize import placement as placement_mod
from trtforge.quantize.calibrators import calibrate
from trtforge.quantize.data import Batches, CalibrationDataError, batches, check_count, load_calibration
from trtforge.quantize.macs import layer_macs
from trtforge.quantize.observers import observe
from trtforge.quantize.precision import SPECS, PrecisionSpec


@dataclass(frozen=True)
class CalibrationSet:
    """The samples, split: the first ones calibrate, the last ``holdout`` share is held back."""

    calib: list[dict[str, np.ndarray]]
    holdout: list[dict[str, np.ndarray]]
    batch: int

    @property
    def calib_batches(self) -> Batches:
        """The calibration samples in batches, each concatenated when read (one at a time)."""
        return batches(self.calib, self.batch)

    @property
    def held_batches(self) -> Batches:
        return batches(self.holdout, self.batch)


def static_batch(specs) -> int | None:
    """The graph's static batch (dim 0 of its inputs), or None. A batch dim written as -1 (PaddlePaddle's
    exports, e.g. PP-OCR's classifier) or 0 is dynamic, like a named one."""
    static = {s[2][0] for s in specs if s[2] and isinstance(s[2][0], int) and s[2][0] > 0}
    return int(next(iter(static))) if static else None


def batch_size(specs, config: QuantConfig) -> int:
    """The graph's static batch when its inputs have one, else ``config.batch_size``."""
    return static_batch(specs) or config.batch_size


def split_samples(model: ir.Model, calibration_data, config: QuantConfig, preprocessing: PreprocessConfig | Mapping | None,
                  ) -> CalibrationSet:
    """Load and check the calibration data (errors before any work), then split off the held-back share."""
    specs = input_specs(model)
    samples = load_calibration(calibration_data, specs, preprocessing, config.max_images)
    check_index_ranges(model, samples)
    static = static_batch(specs)
    return split_loaded(samples, static or config.batch_size, config, whole_batches=static is not None)


def split_loaded(samples: list[dict[str, np.ndarray]], batch: int, config: QuantConfig,
                 whole_batches: bool = False) -> CalibrationSet:
    """Loaded samples split: the last ``config.holdout`` share (at least one) held back; enough for a batch?

    ``whole_batches`` (a graph with a static batch): both parts are whole batches, the held-back share rounded
    up to one and the samples left over from the last calibration batch dropped (the graph runs no other size).
    """
    held = max(1, int(round(len(samples) * config.holdout)))
    if whole_batches:
        held = -(-held // batch) * batch
    check_count(samples, batch, held)
    calib = len(samples) - held
    if whole_batches:
        calib -= calib % batch
    return CalibrationSet(samples[:calib], samples[len(samples) - held :], batch)


def check_index_ranges(model: ir.Model, samples: list[dict[str, np.ndarray]]) -> None:
    """Refuse calibration samples whose integer inputs index past a table they look up (a token id
    beyond an embedding's rows): ONNX Runtime would fail half-way through calibration.

    Example:
        >>> check_index_ranges(model, [{"ids": np.array([[50]])}])   # an Embedding of 10 rows
        CalibrationDataError: calibration input 'ids' holds index 50, ...
    """
    overflow = index_overflow(model, samples)
    if overflow is not None:
        raise CalibrationDataError(overflow.describe("calibration input"))


def calibrate_model(
    model: ir.Model,
    analysis: placement_mod.Analysis,
    calib_batches: list[dict[str, np.ndarray]],
    config: QuantConfig,
    progress=None,
    spec: PrecisionSpec = SPECS["int8"],
) -> tuple[dict[str, float], dict[str, tuple[int, ...]]]:
    """amax per activation tensor (with ``config.calibrator``, on ``spec``'s grid) and the observed shapes.

    Weight-only precisions quantize no activation: one batch gives the shapes (for the MAC counts).
    """
    activations = sorted({name for c in analysis.candidates for _, name in c.activations})
    tensors = [] if spec.weight_only else activations
    shapes_of = [c.output for c in analysis.candidates]
    if spec.weight_only:
        calib_batches = calib_batches[:1]
    stats = observe(model, tensors, calib_batches, shapes_of=shapes_of + activations, num_bins=config.num_bins,
                    progress=progress, total=len(calib_batches))
    amax = {name: calibrate(stats.histograms[name], config.calibrator, config.percentile,
                            qtype=spec.activation_qtype) for name in tensors}
    return amax, stats.shapes


def build_full_plan(
    model: ir.Model,
    analysis: placement_mod.Analysis,
    amax: dict[str, float],
    shapes: dict[str, tuple[int, ...]],
    calibrator: str,
    spec: PrecisionSpec = SPECS["int8"],
) -> QuantPlan:
    """A plan that quantizes every candidate ``spec`` can take (placement then removes layers from it).

    The MAC total counts every candidate of ``analysis``, so a weight-only plan's coverage is the share
    of all Conv/MatMul/Gemm MACs whose weights it quantizes (attention products stay out of it).
    """
    values = values_by_name(model.graph)
    eligible = {c.output for c in spec.candidates(analysis).candidates}
    act = spec.activation_qtype
    layers, excluded, total = [], [], 0
    for c in analysis.candidates:
        macs = layer_macs(c, values, shapes)
        total += macs
        if c.output not in eligible:
            continue
        inputs = [] if act is None else [QuantInput(idx, name, fp16_scales([amax[name] / act.qmax]), dtype=act.name)
                                         for idx, name in c.activations]
        if c.weight is not None:
            weight = spec.weight_input(c.weight, constant_value(values[c.weight[1]]))
            if isinstance(weight, str):
                excluded.append((c.label, weight))
                continue
            inputs.append(weight)
        layers.append(QuantLayer(c.output, c.op_type, c.label, tuple(sorted(inputs, key=lambda q: q.index)), macs))
    return QuantPlan(tuple(layers), tuple(excluded), calibrator, total, spec.precision)


def plan_from_decisions(full: QuantPlan, decisions: dict[str, str | None]) -> QuantPlan:
    """``full`` without the layers a decision keeps in FP16 (listed in ``excluded`` with the reason)."""
    keep = [layer for layer in full.layers if not decisions.get(layer.output)]
    excluded = tuple((layer.label, decisions[layer.output]) for layer in full.layers if decisions.get(layer.output))
    return replace(full, layers=tuple(keep), excluded=full.excluded + excluded)
