"""The frozen build configuration, validated before any expensive work starts.

Example:
    >>> cfg = BuildConfig.create(precision="fp16", batch="1:8:32", targets=["sm86", "sm89"])
    >>> cfg.batches
    (BatchProfile(min=1, opt=8, max=32),)
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from trtforge.builder.portability import (
    HARDWARE_LEVELS,
    cuda_device_count,
    find_lean_runtime,
    lean_runtime_missing_message,
)
from trtforge.builder.profiles import BatchProfile, parse_batch
from trtforge.builder.timing_cache import check_timing_cache_path
from trtforge.core import trt
from trtforge.core.errors import InvalidArgument

PRECISIONS: tuple[str, ...] = ("fp32", "fp16", "bf16", "int8")
#: Precision → the float dtype the graph computes in (int8 graphs are FP16 outside Q/DQ).
FLOAT_OF_PRECISION: dict[str, str | None] = {
    "fp32": None, "fp16": "float16", "bf16": "bfloat16", "int8": "float16",
}
OPTIMIZATION_LEVELS = range(0, 6)


class BuildConfigError(InvalidArgument):
    """A build option that cannot work; raised before capture or build starts."""


@dataclass(frozen=True)
class BuildConfig:
    """Everything that changes the engine's bytes, apart from the graph itself."""

    precision: str = "fp16"
    batches: tuple[BatchProfile, ...] = (BatchProfile(1, 1, 1),)
    shapes: tuple[tuple[str, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]], ...] = ()
    targets: tuple[str, ...] = ()
    optimization_level: int = 3
    workspace_bytes: int | None = None
    hardware_compatibility: str | None = None
    version_compatible: bool = False
    refittable: bool = False
    strip_weights: bool = False
    #: Where build timings are kept; speeds builds up but does not define the engine (not in the key).
    timing_cache: str | None = None

    @classmethod
    def create(
        cls,
        *,
        precision: str = "fp16",
        batch: Any = 1,
        shapes: Mapping[str, Sequence[Sequence[int]]] | None = None,
        targets: Sequence[str] | str | None = None,
        optimization_level: int = 3,
        workspace_bytes: int | None = None,
        hardware_compatibility: str | None = None,
        version_compatible: bool = False,
        refittable: bool = False,
        strip_weights: bool = False,
        timing_cache: str | os.PathLike[str] | None = None,
    ) -> BuildConfig:
        """Validate user-facing options into a config; every error names the fix."""
        precision = str(precision).lower()
        if precision not in PRECISIONS:
            raise BuildConfigError(f"unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}")
        if isinstance(targets, str):
            targets = [t for t in targets.split(",") if t]
        norm_targets = tuple(sorted({t.strip().lower() for t in (targets or ())}, key=_target_order))
        if norm_targets:
            offered = trt.info().compute_capability_targets
            bad = [t for t in norm_targets if t not in offered]
            if bad:
                raise BuildConfigError(
                    f"unknown target(s) {bad}; {trt.info().flavour} offers {', '.join(offered) or 'none'}. "
                    "Leave targets empty for a portable engine."
                )
        if optimization_level not in OPTIMIZATION_LEVELS:
            raise BuildConfigError(f"optimization_level={optimization_level} must be 0..5 (3 is TensorRT's default)")
        if workspace_bytes is not None and workspace_bytes <= 0:
            raise BuildConfigError(f"workspace_bytes={workspace_bytes} must be positive, or None for no limit")
        norm_shapes = tuple(
            sorted((name, tuple(tuple(int(d) for d in s) for s in triple)) for name, triple in (shapes or {}).items())
        )
        for name, triple in norm_shapes:
            if len(triple) != 3:
                raise BuildConfigError(f"shapes[{name!r}] needs (min, opt, max) shapes, got {len(triple)}")
        if hardware_compatibility is not None:
            hardware_compatibility = str(hardware_compatibility).lower()
        _refuse(portability_refusals(norm_targets, hardware_compatibility, bool(version_compatible),
                                     bool(refittable), bool(strip_weights)))
        cache_path = None if timing_cache is None else str(check_timing_cache_path(timing_cache))
        return cls(
            precision=precision,
            batches=parse_batch(batch),
            shapes=norm_shapes,
            targets=norm_targets,
            optimization_level=optimization_level,
            workspace_bytes=workspace_bytes,
            hardware_compatibility=hardware_compatibility,
            version_compatible=bool(version_compatible),
            refittable=bool(refittable),
            strip_weights=bool(strip_weights),
            timing_cache=cache_path,
        )

    @property
    def float_dtype(self) -> str | None:
        return FLOAT_OF_PRECISION[self.precision]

    @property
    def shapes_map(self) -> dict[str, tuple[tuple[int, ...], ...]]:
        return dict(self.shapes)

    def key_fields(self) -> dict[str, Any]:
        """JSON-able fields that change the engine's bytes (for cache keys and sidecars)."""
        data = asdict(self)
        data["batches"] = [str(b) for b in self.batches]
        for name in NOT_IN_KEY:
            data.pop(name, None)
        return data


#: Config fields that do not define the engine: a timing cache only makes the build faster.
NOT_IN_KEY: tuple[str, ...] = ("timing_cache",)


def portability_refusals(
    targets: tuple[str, ...], hardware: str | None, version_compatible: bool, refittable: bool, strip: bool
) -> tuple[tuple[bool, str], ...]:
    """``((condition, reason), ...)`` for the portability and refit options; the first true one is raised."""
    info = trt.info()
    return (
        (hardware is not None and hardware not in HARDWARE_LEVELS,
         f"hardware_compatibility={hardware!r}; choose one of {', '.join(HARDWARE_LEVELS)}, or None"),
        (hardware is not None and info.is_rtx,
         f"hardware_compatibility={hardware!r}: TensorRT-RTX ignores hardware compatibility levels (its engines "
         "already run on every GPU it offers); narrow them with targets=['sm86', ...] instead"),
        (hardware is not None and not info.hardware_compatibility,
         f"hardware_compatibility={hardware!r}: {info.flavour} {info.version} offers no hardware compatibility "
         "levels; build one engine per GPU class instead"),
        (hardware is not None and bool(targets),
         "hardware_compatibility and targets both choose where the engine runs; pass one of them"),
        (version_compatible and not info.version_compatibility,
         f"version_compatible=True: {info.flavour} {info.version} has no VERSION_COMPATIBLE builder flag"),
        (version_compatible and find_lean_runtime() is None, lean_runtime_missing_message()),
        (refittable and not info.refit,
         f"refittable=True: {info.flavour} {info.version} offers no refit (no Refitter / REFIT flag)"),
        (strip and not info.strip_plan,
         f"strip_weights=True: {info.flavour} {info.version} has no STRIP_PLAN builder flag"),
        ((refittable or strip) and info.is_rtx and cuda_device_count() == 0,
         "refittable=True / strip_weights=True: TensorRT-RTX compiles refittable and weight-stripped engines "
         "on a GPU, and this machine has none (no CUDA driver or device). Build them on a GPU machine, "
         "or build without these flags"),
    )


def _target_order(target: str) -> tuple[int, str]:
    """``sm80`` before ``sm120``: targets sort by their number."""
    digits = target[2:]
    return (int(digits) if digits.isdigit() else 0, target)


def _refuse(table: tuple[tuple[bool, str], ...]) -> None:
    for condition, reason in table:
        if condition:
            raise BuildConfigError(reason)
