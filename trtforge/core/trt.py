"""The one place that imports TensorRT: full ``tensorrt`` when present, else ``tensorrt_rtx``.

Everything else asks this module for the bindings and for feature flags found by ``hasattr``,
never by version strings.

Example:
    >>> from trtforge.core import trt
    >>> info = trt.info()
    >>> info.flavour in ("tensorrt", "tensorrt_rtx")
    True
    >>> module = trt.bindings()    # the imported module, for trt.Builder, trt.Logger, ...
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass
from types import ModuleType

from trtforge.core.errors import InvalidArgument, MissingDependency

#: Import order: full TensorRT wins when both are installed.
FLAVOURS: tuple[str, ...] = ("tensorrt", "tensorrt_rtx")

INSTALL_HINT = (
    "No TensorRT bindings found. Install TensorRT-RTX (builds on any machine): "
    "pip install tensorrt-rtx-cu13 tensorrt-rtx-cu13-libs tensorrt-rtx-cu13-bindings ; "
    "or full TensorRT on a GPU machine: pip install 'trtforge[tensorrt]'"
)


#: TensorRT ``DataType`` member name → the dtype name trtforge's specs use (numpy style).
DTYPE_NAMES: dict[str, str] = {
    "FLOAT": "float32", "HALF": "float16", "BF16": "bfloat16", "INT8": "int8", "INT32": "int32",
    "INT64": "int64", "BOOL": "bool", "UINT8": "uint8", "FP8": "float8", "INT4": "int4",
}


def enum_name(value: object) -> str:
    """``trt.DataType.HALF`` (or a double's enum, or its string) → ``"HALF"``."""
    name = getattr(value, "name", None)
    return name if isinstance(name, str) else str(value).rsplit(".", 1)[-1]


def dtype_name(value: object) -> str:
    """A TensorRT ``DataType`` → the spec dtype name (``"float16"``); unknown members in lower case.

    Example:
        >>> dtype_name(bindings().DataType.HALF)
        'float16'
    """
    key = enum_name(value)
    return DTYPE_NAMES.get(key, key.lower())


class TensorRTNotFoundError(MissingDependency):
    """Neither ``tensorrt`` nor ``tensorrt_rtx`` can be imported."""


@dataclass(frozen=True)
class TrtInfo:
    """Flavour, version and the features this binding offers (found by ``hasattr``)."""

    flavour: str
    version: str
    strongly_typed_by_default: bool
    strongly_typed_flag: bool
    fp16_builder_flag: bool
    compute_capability_targets: tuple[str, ...]
    hardware_compatibility: bool
    version_compatibility: bool
    refit: bool
    strip_plan: bool
    timing_cache: bool
    progress_monitor: bool
    runtime_cache: bool

    @property
    def is_rtx(self) -> bool:
        return self.flavour == "tensorrt_rtx"

    def as_dict(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}


@functools.cache
def bindings() -> ModuleType:
    """The imported TensorRT module (``tensorrt`` first, then ``tensorrt_rtx``)."""
    errors = []
    for name in FLAVOURS:
        try:
            return importlib.import_module(name)
        except (ImportError, OSError) as exc:  # OSError: a `tensorrt` whose libnvinfer cannot load
            errors.append(f"{name}: {exc}")
    raise TensorRTNotFoundError(INSTALL_HINT + " (tried " + "; ".join(errors) + ")")


def available() -> bool:
    """True when a TensorRT flavour can be imported."""
    try:
        bindings()
    except TensorRTNotFoundError:
        return False
    return True


def _features(mod: ModuleType) -> TrtInfo:
    flag = getattr(mod, "BuilderFlag", None)
    creation = getattr(mod, "NetworkDefinitionCreationFlag", None)
    cc_enum = getattr(mod, "ComputeCapability", None)
    targets: tuple[str, ...] = ()
    if cc_enum is not None:
        names = [n for n in dir(cc_enum) if n.startswith("SM") and n[2:].isdigit()]
        targets = tuple(n.lower() for n in sorted(names, key=lambda n: int(n[2:])))
    has_strong_flag = creation is not None and hasattr(creation, "STRONGLY_TYPED")
    # Full TensorRT 10 needs the STRONGLY_TYPED flag; TensorRT 11 and RTX are strongly typed only
    # (RTX keeps the flag as a no-op). A binding without FP16/INT8 builder flags is typed by default.
    typed_by_default = flag is not None and not hasattr(flag, "FP16")
    return TrtInfo(
        flavour=mod.__name__,
        version=getattr(mod, "__version__", "unknown"),
        strongly_typed_by_default=typed_by_default,
        strongly_typed_flag=has_strong_flag,
        fp16_builder_flag=flag is not None and hasattr(flag, "FP16"),
        compute_capability_targets=targets,
        hardware_compatibility=hasattr(mod, "HardwareCompatibilityLevel"),
        version_compatibility=flag is not None and hasattr(flag, "VERSION_COMPATIBLE"),
        refit=hasattr(mod, "Refitter") and flag is not None and hasattr(flag, "REFIT"),
        strip_plan=flag is not None and hasattr(flag, "STRIP_PLAN"),
        timing_cache=hasattr(mod, "ITimingCache"),
        progress_monitor=hasattr(mod, "IProgressMonitor"),
        runtime_cache=hasattr(mod, "IRuntimeCache"),
    )


@functools.cache
def info() -> TrtInfo:
    """Flavour, version and feature flags of the installed bindings.

    Example:
        >>> trt.info().strongly_typed_flag
        True
    """
    return _features(bindings())


def installed() -> dict[str, TrtInfo | str]:
    """Every flavour in ``FLAVOURS``: its features when it imports, else the import error (``doctor``).

    Example:
        >>> trt.installed()
        {'tensorrt': "No module named 'tensorrt'", 'tensorrt_rtx': TrtInfo(flavour='tensorrt_rtx', ...)}
    """
    found: dict[str, TrtInfo | str] = {}
    for name in FLAVOURS:
        try:
            found[name] = _features(importlib.import_module(name))
        except (ImportError, OSError) as exc:
            found[name] = str(exc) or type(exc).__name__
    return found


def network_flags() -> int:
    """Creation flags for a strongly typed network on every flavour."""
    mod = bindings()
    if info().strongly_typed_flag:
        return 1 << int(mod.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
    return 0


def compute_capability(target: str):
    """``"sm89"`` → ``trt.ComputeCapability.SM89``; a clear error when not offered."""
    mod = bindings()
    name = target.upper()
    enum = getattr(mod, "ComputeCapability", None)
    if enum is None:
        raise InvalidArgument(
            f"target {target!r}: this TensorRT ({info().flavour} {info().version}) has no compute-"
            "capability targets; omit targets, or use hardware_compatibility with full TensorRT"
        )
    if not hasattr(enum, name) or not name[2:].isdigit():
        raise InvalidArgument(
            f"unknown target {target!r}; known targets: {', '.join(info().compute_capability_targets)}"
        )
    return getattr(enum, name)


def resolve(dotted: str, root: ModuleType | None = None):
    """``"IExecutionContext.execute_async_v3"`` → that attribute of the bindings (AttributeError if absent).

    Example:
        >>> trt.resolve("Runtime.deserialize_cuda_engine")
    """
    obj = bindings() if root is None else root
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def missing(names: tuple[str, ...] | list[str]) -> list[str]:
    """The dotted names of ``names`` that the installed bindings lack (API-surface checks)."""
    absent = []
    for name in names:
        try:
            resolve(name)
        except AttributeError:
            absent.append(name)
    return absent
