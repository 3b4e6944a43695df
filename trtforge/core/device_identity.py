"""Which device this process measures on: the GPU model (``libcuda``, no torch) or, without a GPU, the CPU model.

``trtforge tune`` records it in the ``tuned`` sidecar record, and ``route="auto"`` compares it with the device it
runs on: a measurement from another GPU model is never used.

Example:
    >>> this_device()
    DeviceIdentity(kind='cpu', name='Intel(R) Xeon(R) CPU @ 2.20GHz', driver=None)
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import platform
from dataclasses import dataclass
from pathlib import Path

from trtforge.core.machine import cuda_device_count


@dataclass(frozen=True)
class DeviceIdentity:
    """``kind`` ("gpu" | "cpu"), the model ``name`` (the first GPU's) and the CUDA driver version ("12.8")."""

    kind: str
    name: str
    driver: str | None = None

    def same_model(self, kind: str | None, name: str | None) -> bool:
        """True when a record's device (``kind``, ``name``) is this one's model.

        Example:
            >>> DeviceIdentity("gpu", "NVIDIA H200").same_model("gpu", "NVIDIA H200")
            True
        """
        return kind == self.kind and (name or "").strip() == self.name.strip()

    def describe(self) -> str:
        """``GPU NVIDIA H200 (driver 12.8)`` or ``CPU Intel(R) Xeon(R) ...``."""
        driver = f" (driver {self.driver})" if self.driver else ""
        return f"{self.kind.upper()} {self.name}{driver}"


def _gpu(index: int = 0) -> DeviceIdentity | None:
    try:
        lib = ctypes.CDLL(ctypes.util.find_library("cuda") or "libcuda.so.1")
    except OSError:
        return None
    device, name, version = ctypes.c_int(0), ctypes.create_string_buffer(256), ctypes.c_int(0)
    if lib.cuDeviceGet(ctypes.byref(device), index) != 0 or lib.cuDeviceGetName(name, 256, device) != 0:
        return None
    driver = None
    if lib.cuDriverGetVersion(ctypes.byref(version)) == 0 and version.value:
        driver = f"{version.value // 1000}.{version.value % 1000 // 10}"
    return DeviceIdentity("gpu", name.value.decode(errors="replace").strip(), driver)


def cpu_name() -> str:
    """The CPU model (``/proc/cpuinfo``'s ``model name``), else what ``platform`` knows."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model") and value.strip():
                return value.strip()
    return platform.processor() or platform.machine() or "unknown CPU"


@functools.cache
def this_device() -> DeviceIdentity:
    """The first GPU's model when the driver reports one, else the CPU's (cached for the process)."""
    gpu = _gpu() if cuda_device_count() else None
    return gpu if gpu is not None else DeviceIdentity("cpu", cpu_name())
