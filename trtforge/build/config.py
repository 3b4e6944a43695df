"""The frozen build configuration, validated before any expensive work starts.

Example:
    >>> cfg = BuildConfig.create(precision="fp16", batch="1:8:32", targets=["sm86", "sm89"])
    >>> cfg.batches
    (BatchProfile(min=1, opt=8, max=32),)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from trtforge.build import trt
from trtforge.build.profiles import BatchProfile, parse_batch

PRECISIONS: tuple[str, ...] = ("fp32", "fp16", "bf16", "int8")
#: Precision → the float dtype the graph computes in (int8 graphs are FP16 outside Q/DQ).
FLOAT_OF_PRECISION: dict[str, str | None] = {
    "fp32": None, "fp16": "float16", "bf16": "bfloat16", "int8": "float16",
}
OPTIMIZATION_LEVELS = range(0, 6)


class BuildConfigError(ValueError):
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
    ) -> BuildConfig:
        """Validate user-facing options into a config; every error names the fix."""
        precision = str(precision).lower()
        if precision not in PRECISIONS:
            raise BuildConfigError(f"unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}")
        if isinstance(targets, str):
            targets = [t for t in targets.split(",") if t]
        norm_targets = tuple(sorted({t.strip().lower() for t in (targets or ())}))
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
        return cls(
            precision=precision,
            batches=parse_batch(batch),
            shapes=norm_shapes,
            targets=norm_targets,
            optimization_level=optimization_level,
            workspace_bytes=workspace_bytes,
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
        return data
