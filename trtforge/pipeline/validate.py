"""Every cheap check before capture, passes or build start: the config resolved, the destinations proven."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from trtforge.builder.portability import check_toolchain, file_suffix
from trtforge.builder.precision_plan import check_precision
from trtforge.builder.timing_cache import check_timing_cache_path
from trtforge.capture.export import normalize_example_inputs
from trtforge.capture.onnx_file import check_onnx_path
from trtforge.core.config import (
    QUANTIZED_PRECISIONS,
    QUANTIZED_REQUESTS,
    CompileConfig,
    ConfigError,
    QuantConfig,
    option_spelling,
    unused_quant_options,
)
from trtforge.core.errors import FileConflict, UserError, WrongType, spelled
from trtforge.core.hashing import sha256_file
from trtforge.core.precisions import QUANTIZED
from trtforge.core.precisions import names as precision_names
from trtforge.core.sidecar import is_trtforge_sidecar, read_sidecar
from trtforge.pipeline.paths import (
    OutputPaths,
    check_destinations,
    default_name,
    prepare_output_dir,
    source_info,
)
from trtforge.quantize.precision import check_without_data

log = logging.getLogger(__name__)


def validate(model_or_onnx: Any, example_inputs: Any, config: CompileConfig | None, calibration_data: Any,
             overrides: Mapping[str, Any]) -> tuple[CompileConfig, OutputPaths]:
    """Every cheap check, before capture, passes or build start; the config with its name resolved."""
    config = (config or CompileConfig()).with_overrides(**overrides)
    check_toolchain(config)
    check_precision(config)  # a precision no target GPU accelerates: refused before capture and calibration
    if config.timing_cache is not None:
        config = replace(config, timing_cache=check_timing_cache_path(config.timing_cache))
    quantized = config.precision in QUANTIZED_REQUESTS
    if not quantized and calibration_data is not None:
        raise ConfigError(spelled(
            cli=f"--calib is used only by the quantized precisions ({', '.join(QUANTIZED_PRECISIONS)}; this build is "
                f"{config.precision}); drop it, or ask for --precision int8",
            python=f"calibration_data= is used only by the quantized precisions ({', '.join(QUANTIZED_PRECISIONS)}; "
                   f"this build is {config.precision!r}); drop it, or ask for precision='int8'"))
    if quantized and calibration_data is None:  # weight-only: scales from the weights alone
        check_without_data(config.quant, config.precision, config.strict_accuracy)
    _check_direct(model_or_onnx, config)
    ignored = unused_quant_options(config)
    if ignored:
        log.warning("%s: quantization option(s) that this %s build ignores; drop them, or build a quantized precision", ", ".join(ignored),
                    config.precision)
    name = default_name(model_or_onnx) if config.name is None else config.name
    preprocessing = config.preprocessing
    if preprocessing is None:
        preprocessing = getattr(model_or_onnx, "preprocessing", None)
    config = replace(config, name=name, preprocessing=preprocessing)
    _check_model(model_or_onnx, example_inputs)
    paths = OutputPaths(prepare_output_dir(config.output_dir), name, config.precision, file_suffix(config))
    check_destinations(paths, config.possible_precisions)
    if not config.overwrite:  # the fp16 files an int8 build may fall back to are checked when written
        check_same_build(paths.sidecar(config.precision), config, source_info(model_or_onnx))
    reference = paths.reference_onnx()
    if reference.exists() and not any(is_trtforge_sidecar(p) for p in paths.directory.glob(f"{name}_*.json")):
        raise FileConflict(
            f"{reference} exists and no trtforge sidecar of {name!r} is beside it; refusing to overwrite a "
            "file trtforge did not write. Move it away or choose another name=."
        )
    return config, paths


def differing_options(sidecar: Path, config: CompileConfig, source: Mapping[str, Any]) -> list[str]:
    """The options (and source facts) in which the trtforge build at ``sidecar`` differs from this one."""
    try:
        old = read_sidecar(sidecar)
    except (OSError, UserError):  # damaged or foreign: nothing to compare
        return []
    recorded = old.builder.config or {}
    new = json.loads(json.dumps(config.record_fields(), default=str))
    differ = [f"{key} {recorded.get(key)!r} → {new.get(key)!r}" for key in sorted(set(recorded) | set(new))
              if key in recorded and recorded.get(key) != new.get(key)]
    for key in ("kind", "module", "factory"):
        recorded_source = getattr(old.source, key)
        if key in source and recorded_source is not None and recorded_source != source[key]:
            differ.append(f"source {key} {recorded_source!r} → {source[key]!r}")
    return differ


def check_same_build(sidecar: Path, config: CompileConfig, source: Mapping[str, Any]) -> None:
    """Refuse to replace a different trtforge build of the same name (unless ``overwrite=True``)."""
    if not is_trtforge_sidecar(sidecar):
        return
    differ = differing_options(sidecar, config, source)
    if differ:
        raise FileConflict(
            f"{sidecar} holds a different trtforge build of {config.name!r} ({'; '.join(differ)}); refusing to "
            f"replace it. {_choose_another()}")


def check_same_model(paths: OutputPaths, reference_sha256: str, overwrite: bool) -> None:
    """Refuse to replace the reference graph of another model written under the same name."""
    reference = paths.reference_onnx()
    if not reference.is_file():
        return
    old_sha256 = sha256_file(reference)
    if old_sha256 == reference_sha256:
        return
    if overwrite:
        siblings = sorted(p.name for p in paths.directory.glob(f"{paths.name}_*.json") if p != paths.sidecar()
                          and _reference_sha256(p) == old_sha256)
        if siblings:
            log.warning("%s replaces %s, the reference graph that %s also name(s); their onnxruntime route, check "
                        "and compare will refuse the new graph's hash: rebuild them too, or build this one under "
                        "another name", spelled(cli="--overwrite", python="overwrite=True"), reference.name,
                        ", ".join(siblings))
        return
    raise FileConflict(
        f"{reference} holds another model's graph (its sha256 differs: other weights or another network under "
        f"the same name {paths.name!r}); refusing to replace it. {_choose_another()}")


def _reference_sha256(sidecar: Path) -> str | None:
    """The reference graph's sha256 a sidecar records (None when it is not a readable trtforge sidecar)."""
    try:
        return (json.loads(sidecar.read_text()).get("source") or {}).get("reference_onnx_sha256")
    except (OSError, ValueError, RecursionError, AttributeError):
        return None


def _choose_another() -> str:
    return (f"Choose another name ({option_spelling('name', 'NAME')}) or output folder, or pass "
            f"{spelled(cli='--overwrite', python='overwrite=True')}")


def _check_direct(model_or_onnx: Any, config: CompileConfig) -> None:
    """What the direct path cannot take: an ONNX file; at INT8, auto placement, SmoothQuant and learned
    rounding."""
    if config.path != "direct":
        if config.partitions:
            raise ConfigError(f"{_partition_option(config)} partitions the direct path's conversion; add "
                              f"{spelled(cli='--path direct', python='path=' + repr('direct'))}, or drop it")
        return
    if config.partitions and config.precision in QUANTIZED_PRECISIONS:
        raise ConfigError(f"{_partition_option(config)}: a partitioned module builds float engines (fp32, fp16, bf16), "
                          f"not {config.precision}; drop it, or build a float precision")
    if isinstance(model_or_onnx, (str, Path)):
        raise ConfigError(f"path='direct' converts a PyTorch module, and {model_or_onnx} is a file; pass the "
                          "nn.Module with example inputs, or build the .onnx with path='onnx'")
    if config.precision not in precision_names(path="direct"):  # each precision record's paths
        direct = " or ".join(f"precision={p!r}" for p in precision_names(QUANTIZED, "direct"))
        raise ConfigError(f"precision={config.precision!r} is on the ONNX path only; use path='onnx' "
                          f"(--path onnx), or {direct} on the direct path")
    quant = config.quant if config.quant is not None else QuantConfig()
    if config.precision == "int8" and quant.placement != "default":
        raise ConfigError("placement='auto' measures layers on the ONNX graph and is not on the direct path; "
                          "use placement='default' with include=/exclude=, or path='onnx'")
    if config.precision == "int8" and quant.smoothquant is not None:
        raise ConfigError("smoothquant= rewrites the ONNX graph and is not on the direct path; drop it, "
                          "or use path='onnx'")
    if config.precision == "int8" and quant.rounding != "nearest":
        raise ConfigError("rounding='learned' learns on the ONNX graph's layers and is not on the direct path; "
                          "drop it, or use path='onnx'")


def _partition_option(config: CompileConfig) -> str:
    """How the reader wrote the option that asked for partitioning."""
    if config.min_block_size is not None:
        return option_spelling("min_block_size", str(config.min_block_size))
    return option_spelling("torch_executed_ops", config.torch_executed_ops[0])


def _check_model(model_or_onnx: Any, example_inputs: Any) -> None:
    """A module whose example inputs fit its ``forward``, or an existing file."""
    if not isinstance(model_or_onnx, (str, Path)):
        import torch

        if not isinstance(model_or_onnx, torch.nn.Module):
            raise WrongType(
                f"compile() takes a torch.nn.Module or a path to an .onnx file, not {type(model_or_onnx).__name__}"
            )
        normalize_example_inputs(model_or_onnx, example_inputs)
    else:
        check_onnx_path(Path(model_or_onnx))
