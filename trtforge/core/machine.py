"""Facts about this machine that decide which builds can work: the lean runtime library, CUDA GPUs.

Also the hardware-compatibility level names, so a config can refuse a wrong one before any work.

Example:
    >>> cuda_device_count()       # 0 on a machine without a CUDA driver
    0
    >>> find_lean_runtime()       # None when libnvinfer_lean.so is nowhere to be found
"""

from __future__ import annotations

import ctypes.util
import functools
import importlib.util
import os
from pathlib import Path
from typing import Any

from trtforge.core.gpu_targets import HARDWARE_LEVELS  # noqa: F401  (re-exported: core.gpu_targets.LEVELS)

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


@functools.cache
def compute_capabilities() -> tuple[str, ...]:
    """The local GPUs' compute capabilities as ``"sm89"``, one per GPU (empty without a driver)."""
    try:
        lib = ctypes.CDLL(ctypes.util.find_library("cuda") or "libcuda.so.1")
    except OSError:
        return ()
    found = []
    for index in range(cuda_device_count()):
        device, major, minor = ctypes.c_int(0), ctypes.c_int(0), ctypes.c_int(0)
        lib.cuDeviceGet(ctypes.byref(device), index)
        lib.cuDeviceGetAttribute(ctypes.byref(major), 75, device)  # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
        lib.cuDeviceGetAttribute(ctypes.byref(minor), 76, device)  # ..._MINOR
        found.append(f"sm{major.value}{minor.value}")
    return tuple(found)


def lean_runtime_missing_message() -> str:
    return (
        f"version_compatible=True embeds TensorRT's lean runtime, but {LEAN_RUNTIME_LIBRARY}.* was found "
        "neither next to the TensorRT packages nor on LD_LIBRARY_PATH. Install the package that ships it "
        "(pip install tensorrt-cu13-libs for full TensorRT) or add its folder to LD_LIBRARY_PATH; "
        "or build without version_compatible"
    )


def normalise_targets(targets: Any) -> tuple[str, ...]:
    """``"sm89,sm86"``, a list (``["sm80,sm86", "sm89"]`` too) → sorted unique lower-case names; ``sm80`` first."""
    if isinstance(targets, str):
        targets = [targets]
    names = {t.strip().lower() for item in (targets or ()) for t in str(item).split(",") if t.strip()}
    return tuple(sorted(names, key=target_order))


def target_order(target: str) -> tuple[int, str]:
    digits = target[2:]
    return (int(digits) if digits.isdigit() else 0, target)
