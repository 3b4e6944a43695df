"""A build's precision planned for the GPUs it targets: refused in one line before work, or recorded.

Two checks, both against ``builder.capability``'s table for every target (``--target``, else the
flavour's defaults):

- ``check_precision(config)``: before capture and calibration, from the precision alone (INT8 on
  TensorRT-RTX: no GPU it offers runs W8A8, so nothing is computed before the refusal);
- ``plan_graph(model, config)``: on the processed graph, before the TensorRT build: every quantized
  layer (read from its Q/DQ pattern), what it runs as on each target; the sidecar's ``target_plan``.

Example:
    >>> check_precision(CompileConfig(precision="int8"))     # TensorRT-RTX, default targets
    Traceback (most recent call last):
    trtforge.builder.precision_plan.Unaccelerated: TensorRT-RTX runs INT8 only as weight-only GEMM: ...
"""

from __future__ import annotations

from collections.abc import Mapping

import onnx_ir as ir

from trtforge.builder.capability import (
    OP_CLASS_OF,
    SCHEME_OF_PRECISION,
    Probe,
    QuantizedLayer,
    TargetPlan,
    cell,
    default_targets,
    plan_layers,
    plan_precision,
)
from trtforge.builder.quantized_layers import quantized_layers
from trtforge.core import machine, trt
from trtforge.core.config import AUTO_LADDER, CompileConfig, ConfigError

#: The graph's float dtype (``CompileConfig.float_dtype``) → what an unaccelerated layer runs as.
FLOAT_RUNS_AS: dict[str | None, str] = {None: "fp32", "float16": "fp16", "bfloat16": "bf16"}


class Unaccelerated(ConfigError):
    """A quantized layer no target GPU accelerates (or one a target cannot build); the line says what to use."""


def targets_of(config: CompileConfig) -> tuple[str, ...]:
    """``config.targets``, else the installed flavour's defaults (TensorRT-RTX: its portable set; full
    TensorRT: this machine's GPUs)."""
    if config.targets:
        return config.targets
    info = trt.info()
    return default_targets(info.flavour, info.compute_capability_targets, machine.compute_capabilities())


def check_precision(config: CompileConfig, probe: Probe | None = None) -> None:
    """Refuse a precision that no target accelerates, or that a target cannot build, before any work."""
    targets = targets_of(config)
    if not targets:
        return  # full TensorRT without a local GPU: it cannot build here, and says so itself
    info = trt.info()
    plan = plan_precision(config.precision, info.flavour, info.version, targets,
                          FLOAT_RUNS_AS.get(config.float_dtype, "fp16"), probe)
    reason = plan.refusal(config.allow_unaccelerated)
    if reason is not None:
        raise Unaccelerated(reason)


def plan_graph(model: ir.Model, config: CompileConfig, probe: Probe | None = None) -> TargetPlan:
    """Every quantized layer of ``model`` planned on every target; refused (``Unaccelerated``) when a
    layer no target accelerates is not allowed, or a target cannot build one."""
    return _checked(quantized_layers(model), config, probe)


def _checked(layers: list[QuantizedLayer], config: CompileConfig, probe: Probe | None) -> TargetPlan:
    """``layers`` planned on ``config``'s targets; refused in one line when the plan cannot go on."""
    info = trt.info()
    plan = plan_layers(layers, info.flavour, info.version, targets_of(config),
                       FLOAT_RUNS_AS.get(config.float_dtype, "fp16"), probe)
    reason = plan.refusal(config.allow_unaccelerated)
    if reason is not None:
        raise Unaccelerated(reason)
    return plan


def auto_ladder(config: CompileConfig, probe: Probe | None = None) -> dict[str, tuple[str, ...]]:
    """``precision="auto"``'s ladder: op type → the ``AUTO_LADDER`` precisions that every target accelerates for
    its op class (the capability table; ``probe`` may refuse a cell), cheapest first. No targets: none.

    Example:
        >>> auto_ladder(CompileConfig(precision="auto", quant=QuantConfig(error_budget=0.1)))  # TensorRT-RTX
        {'Conv': (), 'ConvTranspose': (), 'Gemm': ('int8-wo',), 'MatMul': ('int8-wo',)}
    """
    info, targets = trt.info(), targets_of(config)
    runs = FLOAT_RUNS_AS.get(config.float_dtype, "fp16")
    memo: dict[tuple[str, str], bool] = {}

    def everywhere(op_class: str, precision: str) -> bool:
        if (op_class, precision) not in memo:
            scheme = SCHEME_OF_PRECISION[precision]
            memo[op_class, precision] = bool(targets) and all(
                cell(info.flavour, info.version, t, op_class, scheme, runs, probe).state == "accelerated" for t in targets)
        return memo[op_class, precision]

    return {op: tuple(p for rung in AUTO_LADDER for p in rung if everywhere(op_class, p))
            for op, op_class in OP_CLASS_OF.items()}


#: The direct path's quantized node kinds (``convert`` records ``module path → aten op``) → an ONNX op type.
DIRECT_OP_TYPES: dict[str, str] = {"convolution": "Conv"}


def plan_direct(int8_layers: Mapping[str, str], config: CompileConfig, probe: Probe | None = None) -> TargetPlan:
    """``plan_graph`` for the direct path's INT8 layers (module path → the quantized aten op; W8A8 each)."""
    layers = [QuantizedLayer(path, DIRECT_OP_TYPES.get(op, "MatMul"), "int8") for path, op in int8_layers.items()]
    return _checked(layers, config, probe)


def plan_notes(plan: TargetPlan) -> list[str]:
    """The sidecar notes of a plan built with unaccelerated layers."""
    if not plan.unaccelerated:
        return []
    names = ", ".join(p.layer.name for p in plan.unaccelerated[:3])
    more = f" and {len(plan.unaccelerated) - 3} more" if len(plan.unaccelerated) > 3 else ""
    runs = plan.unaccelerated[0].cells[0].runs_as if plan.targets else "?"
    return [f"allow_unaccelerated: {len(plan.unaccelerated)} quantized layer(s) run unaccelerated ({runs}) on every "
            f"target ({', '.join(plan.targets)}): {names}{more}; see target_plan (trtforge inspect)"]
