"""INT8 glue of the direct path: the module quantized into the one ``QuantPlan`` (``quantize.module_quantizer``),
which the lowering reads, and the sidecar's report of what the lowering applied."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from trtforge.core.config import CompileConfig, QuantConfig
from trtforge.core.errors import InvalidArgument


def direct_int8(model: Any, args: tuple, config: CompileConfig, calibration_data: Any,
                 input_names: Sequence[str] | None):
    """INT8 on the direct path: load the calibration data, then calibrate, place, bias-correct and measure the
    module (``quantize.module_quantizer``); the result's plan and module are what the lowering takes.

    Example:
        >>> result = direct_int8(model, (x,), config, Path("calib/"), None)
        >>> lower_module(result.model, (x,), precision="fp16", int8=result.plan)
    """
    import inspect

    import numpy as np

    from trtforge.quantize.data import load_calibration
    from trtforge.quantize.module_quantizer import quantize_module

    quant = config.quant if config.quant is not None else QuantConfig()
    params = [p.name for p in inspect.signature(model.forward).parameters.values() if p.kind is not p.VAR_POSITIONAL]
    names = list(input_names or [params[i] if i < len(params) else f"input_{i}" for i in range(len(args))])
    if len(names) != len(args):
        raise InvalidArgument(f"input_names={names} names {len(names)} input(s) and {len(args)} example input(s) "
                              "were given; pass one name per input")
    specs = [(name, np.dtype(str(x.dtype).removeprefix("torch.")), (None, *x.shape[1:]))
             for name, x in zip(names, args, strict=True)]
    samples = load_calibration(calibration_data, specs, config.preprocessing, quant.max_images)
    return quantize_module(model, names, samples, quant, progress=config.progress)


def int8_report(result: Any, applied: Mapping[str, str]) -> dict:
    """The sidecar's quantization record of a direct-path INT8 build: the quantizer's report, with each layer
    placed in INT8 that the lowering found no convolution/product with a constant weight for moved to the
    layers kept in FP16 (``report.plan_summary``, as on the ONNX path)."""
    from trtforge.quantize.report import plan_summary

    plan = result.plan.without([layer.output for layer in result.plan.layers if layer.output not in applied],
                               "the direct path found no convolution or product with a constant weight in it")
    return {**result.report, **plan_summary(plan, result.report["layers_total"])}
