"""The typed record of one build: what the build made, kept by the engine cache, turned into the sidecar.

Example:
    >>> record = BuildRecord(inputs=(), outputs=(), profiles=(), precision=PrecisionRecord(built="fp16"),
    ...                      builder=BuilderRecord(flavour="tensorrt_rtx"), source=SourceRecord(path="direct"))
    >>> Sidecar(name="m", engine_file="m.engine", engine_size=n, engine_sha256=digest, build=record.for_engine())
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from trtforge.core.sidecar_records import (
    BuilderRecord,
    PrecisionRecord,
    QuantizationRecord,
    ShapeInputRecord,
    SourceRecord,
    TargetPlanRecord,
)
from trtforge.core.specs import TensorSpec

#: One dict per optimization profile: {input name: {"min": [...], "opt": [...], "max": [...]}}.
ProfileRecord = dict[str, dict[str, list[int]]]


def normalize_profiles(value: Any) -> tuple[ProfileRecord, ...]:
    """Profiles as plain JSON (int lists), whatever sequences they came in."""
    return tuple(
        {name: {k: [int(d) for d in dims] for k, dims in ranges.items()} for name, ranges in profile.items()}
        for profile in value or ()
    )


@dataclass(frozen=True, kw_only=True)
class BuildRecord:
    """What one build made, typed: the sidecar less the files' names, the caller's notes and the cache state.

    The build writes it, the engine cache keeps it (``to_dict`` / ``from_dict``), and the sidecar holds it
    (``Sidecar.build``, as ``for_engine`` makes it); no untyped dict lies in between. The sub-records
    accept plain dicts (the JSON objects) and are stored typed.

    Example:
        >>> record = BuildRecord(inputs=(), outputs=(), profiles=(), precision=PrecisionRecord(built="fp16"),
        ...                      builder=BuilderRecord(flavour="tensorrt_rtx"))
        >>> record.for_engine(cache={"key": "k", "hit": True}).builder.cache
        {'key': 'k', 'hit': True}
    """

    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    profiles: tuple[ProfileRecord, ...]
    precision: PrecisionRecord
    builder: BuilderRecord
    #: The build's own source facts: ``path="direct"``, or the ONNX graphs' sha256.
    source: SourceRecord = field(default_factory=SourceRecord)
    notes: tuple[str, ...] = ()
    quantization: QuantizationRecord | None = None
    shape_inputs: tuple[ShapeInputRecord, ...] = ()
    #: What each quantized layer runs as on each target (``builder.capability``); None without quantized layers.
    target_plan: TargetPlanRecord | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "outputs", tuple(self.outputs))
        object.__setattr__(self, "profiles", normalize_profiles(self.profiles))
        object.__setattr__(self, "precision", PrecisionRecord.from_dict(self.precision))
        object.__setattr__(self, "builder", BuilderRecord.from_dict(self.builder))
        object.__setattr__(self, "source", SourceRecord.from_dict(self.source))
        object.__setattr__(self, "notes", (self.notes,) if isinstance(self.notes, str) else tuple(self.notes))
        if self.quantization is not None:
            object.__setattr__(self, "quantization", QuantizationRecord.from_dict(self.quantization))
        object.__setattr__(self, "shape_inputs", tuple(ShapeInputRecord.from_dict(r) for r in self.shape_inputs))
        if self.target_plan is not None:
            object.__setattr__(self, "target_plan", TargetPlanRecord.from_dict(self.target_plan))

    def for_engine(self, *, source: SourceRecord | None = None, notes: tuple[str, ...] = (),
                   cache: Mapping[str, Any] | None = None) -> BuildRecord:
        """This build as the sidecar of one engine file holds it (``Sidecar.build``): ``source`` (the caller's
        facts) over the build's own, the caller's ``notes`` before the build's, the cache state in
        ``builder.cache``.

        Example:
            >>> Sidecar(name="m", engine_file="m.engine", engine_size=n, engine_sha256=digest,
            ...         build=record.for_engine(notes=("from the caller",), cache={"key": key, "hit": True}))
        """
        return replace(self, builder=replace(self.builder, cache=cache), source=_merge(self.source, source),
                       notes=(*notes, *self.notes))

    def to_dict(self) -> dict[str, Any]:
        """The JSON object the engine cache stores."""
        return {"inputs": [s.as_dict() for s in self.inputs], "outputs": [s.as_dict() for s in self.outputs],
                "profiles": list(self.profiles), "precision": self.precision.to_dict(),
                "builder": self.builder.to_dict(), "source": self.source.to_dict(), "notes": list(self.notes),
                "quantization": None if self.quantization is None else self.quantization.to_dict(),
                "shape_inputs": [r.to_dict() for r in self.shape_inputs],
                "target_plan": None if self.target_plan is None else self.target_plan.to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BuildRecord:
        """A record from ``to_dict``'s object (an engine-cache entry)."""
        quantization = data.get("quantization")
        return cls(inputs=tuple(TensorSpec.from_dict(s) for s in data["inputs"]),
                   outputs=tuple(TensorSpec.from_dict(s) for s in data["outputs"]), profiles=data["profiles"],
                   precision=PrecisionRecord.from_dict(data["precision"]),
                   builder=BuilderRecord.from_dict(data["builder"]), source=SourceRecord.from_dict(data.get("source")),
                   notes=tuple(data.get("notes") or ()),
                   quantization=None if quantization is None else QuantizationRecord.from_dict(quantization),
                   shape_inputs=tuple(ShapeInputRecord.from_dict(r) for r in data.get("shape_inputs") or ()),
                   target_plan=None if data.get("target_plan") is None
                   else TargetPlanRecord.from_dict(data["target_plan"]))


def _merge(base: SourceRecord, over: SourceRecord | None) -> SourceRecord:
    """``base`` with every field that ``over`` sets."""
    if over is None:
        return base
    return replace(base, **{f.name: getattr(over, f.name) for f in fields(over)
                            if f.name != "extra" and getattr(over, f.name) is not None})
