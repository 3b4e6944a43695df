"""Portability options: where an engine may run, what it costs, and how its files are named.

Three choices, each explicit and recorded in the sidecar's ``builder`` block:

- ``targets`` (TensorRT-RTX): compute capabilities the engine carries kernels for;
- ``hardware_compatibility`` (full TensorRT): ``"ampere_plus"`` or ``"same_compute_capability"``;
- ``version_compatible`` (both): the plan embeds the lean runtime (host code), so newer TensorRT
  releases can run it. Building one needs the lean runtime library (``libnvinfer_lean.so``).

Each option adds a file-name suffix, so a portable engine never overwrites the default one.

Example:
    >>> cfg = BuildConfig.create(precision="fp16", version_compatible=True)   # refused without the lib
    >>> file_suffix(BuildConfig.create(targets=["sm89"]))
    '_sm89'
"""

from __future__ import annotations

import ctypes.util
import functools
import importlib.util
import os
from pathlib import Path
from typing import Any

#: User-facing name → ``HardwareCompatibilityLevel`` member.
HARDWARE_LEVELS: dict[str, str] = {
    "ampere_plus": "AMPERE_PLUS",
    "same_compute_capability": "SAME_COMPUTE_CAPABILITY",
}

#: Every TensorRT attribute ``apply_portability`` uses; tests check each against the bindings.
TRT_API_USED: tuple[str, ...] = (
    "IBuilderConfig.hardware_compatibility_level", "IBuilderConfig.set_flag",
    "HardwareCompatibilityLevel.AMPERE_PLUS", "HardwareCompatibilityLevel.SAME_COMPUTE_CAPABILITY",
    "BuilderFlag.VERSION_COMPATIBLE", "BuilderFlag.REFIT", "BuilderFlag.STRIP_PLAN", "BuilderFlag.REFIT_IDENTICAL",
)

#: The library a version-compatible build embeds (TensorRT loads it while building).
LEAN_RUNTIME_LIBRARY = "libnvinfer_lean.so"

#: Python packages whose folders may hold the TensorRT shared libraries.
LIBRARY_PACKAGES: tuple[str, ...] = ("tensorrt_libs", "tensorrt", "tensorrt_rtx_libs", "tensorrt_rtx")


@functools.cache
def find_lean_runtime() -> Path | None:
    """Path of ``libnvinfer_lean.so*`` next to the TensorRT packages or on the library path; else None."""
    folders: list[Path] = []
    for package in LIBRARY_PACKAGES:
        spec = importlib.util.find_spec(package)
        if spec is not None and spec.submodule_search_locations:
            folders.extend(Path(p) for p in spec.submodule_search_locations)
    folders.extend(Path(p) for p in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p)
    for folder in folders:
        for candidate in sorted(folder.glob(f"{LEAN_RUNTIME_LIBRARY}*")):
            return candidate
    found = ctypes.util.find_library("nvinfer_lean")
    return Path(found) if found else None


@functools.cache
def cuda_device_count() -> int:
    """CUDA GPUs the driver reports (0 without a driver); asked through ``libcuda`` directly."""
    name = ctypes.util.find_library("cuda") or "libcuda.so.1"
    try:
        lib = ctypes.CDLL(name)
    except OSError:
        return 0
    count = ctypes.c_int(0)
    if lib.cuInit(0) != 0 or lib.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return 0
    return count.value


def lean_runtime_missing_message() -> str:
    return (
        f"version_compatible=True embeds TensorRT's lean runtime, but {LEAN_RUNTIME_LIBRARY}.* was found "
        "neither next to the TensorRT packages nor on LD_LIBRARY_PATH. Install the package that ships it "
        "(pip install tensorrt-cu13-libs for full TensorRT) or add its folder to LD_LIBRARY_PATH; "
        "or build without version_compatible"
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
