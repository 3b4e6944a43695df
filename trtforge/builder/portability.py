"""Portability options: where an engine may run, what it costs, and how its files are named.

Three choices, each explicit and recorded in the sidecar's ``builder`` block:

- ``targets`` (TensorRT-RTX): compute capabilities the engine carries kernels for;
- ``hardware_compatibility`` (full TensorRT): ``"ampere_plus"`` or ``"same_compute_capability"``;
- ``version_compatible`` (both): the plan embeds the lean runtime (host code), so newer TensorRT
  releases can run it. Building one needs the lean runtime library (``trtforge.core.machine``).

Each option adds a file-name suffix, so a portable engine never overwrites the default one.

Example:
    >>> CompileConfig(version_compatible=True).check_toolchain()   # refused without the lib
    >>> file_suffix(CompileConfig(targets=["sm89"]))
    '_sm89'
"""

from __future__ import annotations

from typing import Any

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
