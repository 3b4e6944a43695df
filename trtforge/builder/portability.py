"""Portability options: where an engine may run, what it costs, and how its files are named.

Three choices, each explicit and recorded in the sidecar's ``builder`` block:

- ``targets`` (TensorRT-RTX): compute capabilities the engine carries kernels for;
- ``hardware_compatibility`` (full TensorRT): ``"ampere_plus"`` or ``"same_compute_capability"``;
- ``version_compatible`` (both): the plan embeds the lean runtime (host code), so newer TensorRT
  releases can run it. Building one needs the lean runtime library (``trtforge.core.machine``).

Each option adds a file-name suffix, so a portable engine never overwrites the default one.

Example:
    >>> check_toolchain(CompileConfig(version_compatible=True))   # refused without the lib
    >>> file_suffix(CompileConfig(targets=["sm89"]))
    '_sm89'
"""

from __future__ import annotations

from typing import Any

from trtforge.core import machine, trt
from trtforge.core.config import ConfigError
from trtforge.core.machine import HARDWARE_LEVELS

#: Every TensorRT attribute ``apply_portability`` uses; tests check each against the bindings.
TRT_API_USED: tuple[str, ...] = (
    "IBuilderConfig.hardware_compatibility_level", "IBuilderConfig.set_flag",
    "HardwareCompatibilityLevel.AMPERE_PLUS", "HardwareCompatibilityLevel.SAME_COMPUTE_CAPABILITY",
    "BuilderFlag.VERSION_COMPATIBLE", "BuilderFlag.REFIT", "BuilderFlag.STRIP_PLAN", "BuilderFlag.REFIT_IDENTICAL",
)


def file_suffix(config: Any) -> str:
    """The file-name suffix of an engine built with ``config`` ('' for the default engine).

    Order is fixed: targets, hardware level, version compatibility, refit, stripped weights.
    """
    parts: list[str] = []
    if config.targets:
        parts.append("_".join(config.targets))
    if config.hardware_compatibility:
        parts.append(config.hardware_compatibility)
    if config.version_compatible:
        parts.append("version_compatible")
    if config.refittable:
        parts.append("refittable")
    if config.strip_weights:
        parts.append("stripped")
    return "".join(f"_{p}" for p in parts)


def carries_host_code(config: Any) -> bool:
    """True when the plan embeds host code (a version-compatible engine carries the lean runtime)."""
    return bool(config.version_compatible)


def builder_record(config: Any) -> dict[str, Any]:
    """The portability facts the sidecar's ``builder`` block records."""
    return {
        "hardware_compatibility": config.hardware_compatibility,
        "version_compatible": config.version_compatible,
        "host_code": carries_host_code(config),
        "refittable": config.refittable,
        "weights_stripped": config.strip_weights,
    }


def apply_portability(cfg: Any, config: Any, bindings: Any) -> None:
    """Set hardware level and the version-compatible / refit / strip flags on an ``IBuilderConfig``."""
    flag = bindings.BuilderFlag
    if config.hardware_compatibility:
        level = HARDWARE_LEVELS[config.hardware_compatibility]
        cfg.hardware_compatibility_level = getattr(bindings.HardwareCompatibilityLevel, level)
    if config.version_compatible:
        cfg.set_flag(flag.VERSION_COMPATIBLE)
    if config.refittable:
        cfg.set_flag(flag.REFIT)
    if config.strip_weights:
        cfg.set_flag(flag.STRIP_PLAN)
        if not config.refittable:
            # A stripped plan must be refitted before use; without REFIT, with the very same weights.
            cfg.set_flag(flag.REFIT_IDENTICAL)


def check_toolchain(config: Any) -> None:
    """Refuse what the installed TensorRT or this machine cannot build (first reason raised)."""
    if config.targets:
        offered = trt.info().compute_capability_targets
        bad = [t for t in config.targets if t not in offered]
        if bad:
            raise ConfigError(
                f"unknown target(s) {bad}; {trt.info().flavour} offers {', '.join(offered) or 'none'}. "
                "Leave targets empty for a portable engine."
            )
    for condition, reason in portability_refusals(config):
        if condition:
            raise ConfigError(reason)


def portability_refusals(config: Any) -> tuple[tuple[bool, str], ...]:
    """``((condition, reason), ...)`` for the portability and refit options; the first true one is raised."""
    info = trt.info()
    hardware, refit, strip = config.hardware_compatibility, config.refittable, config.strip_weights
    return (
        (hardware is not None and info.is_rtx,
         f"hardware_compatibility={hardware!r}: TensorRT-RTX ignores hardware compatibility levels (its engines "
         "already run on every GPU it offers); narrow them with targets=['sm86', ...] instead"),
        (hardware is not None and not info.hardware_compatibility,
         f"hardware_compatibility={hardware!r}: {info.flavour} {info.version} offers no hardware compatibility "
         "levels; build one engine per GPU class instead"),
        (hardware is not None and bool(config.targets),
         "hardware_compatibility and targets both choose where the engine runs; pass one of them"),
        (config.version_compatible and not info.version_compatibility,
         f"version_compatible=True: {info.flavour} {info.version} has no VERSION_COMPATIBLE builder flag"),
        (config.version_compatible and machine.find_lean_runtime() is None, machine.lean_runtime_missing_message()),
        (refit and not info.refit,
         f"refittable=True: {info.flavour} {info.version} offers no refit (no Refitter / REFIT flag)"),
        (strip and not info.strip_plan,
         f"strip_weights=True: {info.flavour} {info.version} has no STRIP_PLAN builder flag"),
        ((refit or strip) and info.is_rtx and machine.cuda_device_count() == 0,
         "refittable=True / strip_weights=True: TensorRT-RTX compiles refittable and weight-stripped engines "
         "on a GPU, and this machine has none (no CUDA driver or device). Build them on a GPU machine, "
         "or build without these flags"),
    )
