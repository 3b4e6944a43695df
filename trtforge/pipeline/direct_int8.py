"""INT8 glue of the direct path: module calibration → the scales the lowering takes, and its report.

This moves to ``trtforge.quantize`` with the unified quantization plan."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from trtforge.core.config import CompileConfig, QuantConfig
from trtforge.core.errors import InvalidArgument


def direct_int8(model: Any, args: tuple, config: CompileConfig, calibration_data: Any,
                 input_names: Sequence[str] | None):
    """INT8 on the direct path: calibrate the module (``quantize.module_calibration``) and hand the
    scales of the layers placed in INT8 to the lowering as a frozen mapping.

    Example:
        >>> plan, scales = direct_int8(model, (x,), config, Path("calib/"), None)
    """
    import inspect

    import numpy as np

    from trtforge.convert.int8 import Int8Scales, LayerScales
    from trtforge.quantize.data import load_calibration
    from trtforge.quantize.module_calibration import calibrate_module

    quant = config.quant if config.quant is not None else QuantConfig()
    params = [p.name for p in inspect.signature(model.forward).parameters.values() if p.kind is not p.VAR_POSITIONAL]
    names = list(input_names or [params[i] if i < len(params) else f"input_{i}" for i in range(len(args))])
    if len(names) != len(args):
        raise InvalidArgument(f"input_names={names} names {len(names)} input(s) and {len(args)} example input(s) "
                              "were given; pass one name per input")
    specs = [(name, np.dtype(str(x.dtype).removeprefix("torch.")), (None, *x.shape[1:]))
             for name, x in zip(names, args, strict=True)]
    samples = load_calibration(calibration_data, specs, config.preprocessing, quant.max_images)
    plan = calibrate_module(model, names, samples, quant)
    scales = Int8Scales.of({path: LayerScales(act, weights) for path, (act, weights) in plan.int8_modules().items()})
    return plan, scales


def int8_report(plan: Any, config: CompileConfig, applied: Mapping[str, str]) -> dict:
    """The sidecar's quantization record for a direct-path INT8 build; a layer placed in INT8 that the
    lowering found no convolution/product with a constant weight for is listed as kept in FP16."""
    quant = config.quant if config.quant is not None else QuantConfig()
    excluded = plan.excluded() + [
        {"layer": path, "reason": "the direct path found no convolution or product with a constant weight in it"}
        for path in plan.int8_modules() if path not in applied]
    return {"calibrator": plan.calibrator, "percentile": quant.percentile, "smoothquant_alpha": None,
            "bias_correction": "not on the direct path", "placement": "default", "task": quant.task,
            "samples": {"calibration": plan.samples}, "int8_layers": len(applied),
            "layers_total": len(plan.decisions), "excluded_layers": excluded}
