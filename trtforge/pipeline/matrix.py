"""``build_matrix``: one engine per compute capability, and one multi-target engine."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from rich.console import Console

from trtforge.artifact import Artifact
from trtforge.builder.portability import check_toolchain
from trtforge.core.config import CompileConfig, ConfigError
from trtforge.core.errors import WrongType
from trtforge.pipeline.onnx_path import one_export_per_call
from trtforge.pipeline.verb import compile


def build_matrix(
    model_or_onnx: Any,
    example_inputs: Any = None,
    config: CompileConfig | None = None,
    *,
    targets: Sequence[str],
    multi_target: bool = True,
    calibration_data: Any = None,
    console: Console | None = None,
    **overrides: Any,
) -> list[Artifact]:
    """One engine per compute capability (TensorRT-RTX), and one multi-target engine when asked.

    Every engine gets its target suffix (``_sm86``; ``_sm80_sm86_sm89`` for the multi-target one)
    and its size in its sidecar (``trtforge build --target ... --matrix`` prints them as a table).
    ``overrides`` are ``CompileConfig`` fields.

    Example:
        >>> arts = build_matrix(model, (x,), targets=["sm80", "sm86", "sm89", "sm120"], precision="fp16")
        >>> [a.engine_path.name for a in arts][-1]
        'efficientnet_lite0_fp16_sm80_sm86_sm89_sm120.engine'
    """
    targets = [str(t).lower() for t in targets]
    if not targets:
        raise ConfigError("build_matrix needs targets=[...], e.g. ['sm80', 'sm86', 'sm89', 'sm120']")
    if "targets" in overrides:
        raise WrongType("build_matrix takes targets= once, as its own argument")
    config = (config or CompileConfig()).with_overrides(**overrides)
    for target in targets:  # refuse an unknown target before the first (expensive) build
        check_toolchain(replace(config, targets=(target,)))
    console = console or Console(file=sys.stderr)
    plans: list[list[str]] = [[t] for t in targets] + ([targets] if multi_target and len(targets) > 1 else [])
    with one_export_per_call():  # a module is exported once, not once per target
        return [compile(model_or_onnx, example_inputs, config, targets=plan, calibration_data=calibration_data,
                        console=console) for plan in plans]
