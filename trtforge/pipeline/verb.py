"""``trtforge.compile``, the one public verb: validate → cache lookup → (ONNX or direct path) → artifact."""

from __future__ import annotations

import contextlib
import logging
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from trtforge.artifact import Artifact, PartitionedArtifact
from trtforge.cache.engine_cache import open_engine_cache
from trtforge.capture.export import training_flags_kept
from trtforge.core.config import CompileConfig
from trtforge.core.errors import AccuracyBudgetMissed, spelled
from trtforge.core.sidecar import QuantizationRecord
from trtforge.pipeline.direct_path import convert_and_build
from trtforge.pipeline.onnx_path import capture_and_build
from trtforge.pipeline.partitioned_path import compile_partitioned
from trtforge.pipeline.paths import removed_if_left_empty
from trtforge.pipeline.store import lookup_request, request_key_of, warn_cache
from trtforge.pipeline.validate import validate
from trtforge.pipeline.write import write_artifact

log = logging.getLogger(__name__)


def compile(  # noqa: A001 - the public verb users expect
    model_or_onnx: Any,
    example_inputs: Any = None,
    config: CompileConfig | None = None,
    *,
    calibration_data: Any = None,
    console: Console | None = None,
    **overrides: Any,
) -> Artifact | PartitionedArtifact:
    """Turn a PyTorch module (with example inputs) or an ``.onnx`` file into an engine + sidecar.

    ``overrides`` are ``CompileConfig`` fields, applied over ``config`` (default: ``CompileConfig()``).
    A second call with the same arguments is a cache hit (``cache_dir``, default
    ``~/.cache/trtforge/engines`` or ``$TRTFORGE_CACHE_DIR``; ``cache=False`` turns it off).
    Portability options add a file-name suffix (``_sm89``, ``_ampere_plus``, ...); see docs/portability.md.
    On the direct path, ``min_block_size`` or ``torch_executed_ops`` partitions the module: ops with no
    converter (and the named ones) stay in PyTorch, and a ``PartitionedArtifact`` (its folder) comes back.

    Example:
        >>> art = compile("model.onnx", precision="fp16", batch=[(1, 1, 1), (1, 8, 32)], targets=["sm89"])
        >>> art = compile(model, (x,), CompileConfig(precision="int8"), calibration_data=Path("calib/"))
    """
    output_dir = overrides.get("output_dir", (config or CompileConfig()).output_dir)
    with removed_if_left_empty(output_dir):  # a failed or interrupted build leaves no empty folder of its own
        return _compile(model_or_onnx, example_inputs, config, calibration_data, console, overrides)


def _compile(model_or_onnx: Any, example_inputs: Any, config: CompileConfig | None, calibration_data: Any,
             console: Console | None, overrides: Mapping[str, Any]) -> Artifact | PartitionedArtifact:
    config, paths = validate(model_or_onnx, example_inputs, config, calibration_data, overrides)
    engine_cache = open_engine_cache(config.cache_dir) if config.cache else None
    if engine_cache is None and config.cache:  # unwritable: warned once; the op-support table stays in memory
        config = replace(config, cache=False)
    if config.path == "direct" and config.partitions:  # ops stay in PyTorch: a partitioned module's folder
        with training_flags_kept(model_or_onnx):
            return compile_partitioned(model_or_onnx, example_inputs, config, paths, engine_cache)
    # Bound to today's stderr: the exporter's quiet block swaps sys.stderr while the export spinner runs.
    console = console or Console(file=sys.stderr)
    with contextlib.ExitStack() as stack:
        stack.enter_context(training_flags_kept(model_or_onnx))
        request = request_key_of(model_or_onnx, example_inputs, config, engine_cache)
        built = lookup_request(stack, engine_cache, request)
        if built is None:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="trtforge-")))
            if config.path == "direct":
                built = convert_and_build(model_or_onnx, example_inputs, config, engine_cache=engine_cache,
                                           console=console, calibration_data=calibration_data)
            else:
                built = capture_and_build(model_or_onnx, example_inputs, config, tmp=tmp,
                                           calibration_data=calibration_data, engine_cache=engine_cache,
                                           console=console)
            if request is not None:
                try:
                    engine_cache.remember_request(request, built.key)
                except OSError as exc:
                    warn_cache(engine_cache, exc)
        check_budget(built.record.quantization, config)
        if built.hit:
            log.info("cache hit: %s (%s…)", config.name, built.key[:12])
            if config.progress:
                console.print(f"[green]cache hit[/] {escape(config.name)} ({built.key[:12]}…)")
        return write_artifact(model_or_onnx, config, paths, built, cached=engine_cache is not None)


def check_budget(report: QuantizationRecord | None, config: CompileConfig) -> None:
    """A missed INT8 error budget: a warning line, or (``strict_accuracy=True``) a refusal before writing."""
    budget = report.error_budget if report is not None else None
    if budget is None or budget.holds in (None, True):
        return
    measured = ", ".join(f"{x.get('measured', float('nan')):.4g}" for x in budget.limits or ())
    message = (f"the {config.precision.upper()} build misses its error budget ({budget.description}: measured {measured}); "
               f"loosen it ({spelled(cli='--error-budget', python='error_budget=')}), try "
               f"{spelled(cli='--placement auto', python='placement=' + repr('auto'))}, or build fp16")
    if config.strict_accuracy:
        raise AccuracyBudgetMissed(message + "; nothing was written (strict_accuracy)")
    log.warning(message)
