"""The record of one build (the sidecar's facts) and the build's products (``Built``)."""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from trtforge._version import __version__
from trtforge.builder.build import BuildResult
from trtforge.cache.engine_cache import CacheEntry
from trtforge.core.atomic import Payload
from trtforge.core.build_record import BuildRecord
from trtforge.core.config import CompileConfig
from trtforge.core.sidecar import (
    GraphEditsRecord,
    NMSRecord,
    PrecisionRecord,
    QuantizationRecord,
    ShapeInputRecord,
    SourceRecord,
    TargetPlanRecord,
)
from trtforge.core.specs import TensorSpec


@dataclass(frozen=True)
class Built:
    """One build's products: fresh (bytes), or a cache hit (the checked blobs, linked into place when written)."""

    key: str
    plan: Payload
    #: The processed and reference graphs; None on the direct path (no ONNX is made).
    processed_onnx: Payload | None
    reference_onnx: Payload | None
    #: The typed facts of the build: inputs, outputs, profiles, precision, builder, source hashes, notes.
    record: BuildRecord
    #: The engine's sha256 (hashed once: by the build, or checked by the cache).
    engine_sha256: str
    hit: bool = False

    @property
    def engine_size(self) -> int:
        return self.plan.stat().st_size if isinstance(self.plan, Path) else len(self.plan)

    def files(self) -> dict[str, bytes]:
        """A fresh build's members, for the engine cache."""
        graphs = {"processed.onnx": self.processed_onnx, "reference.onnx": self.reference_onnx}
        members = {"engine": self.plan, "record.json": json.dumps(self.record.to_dict()).encode(),
                   **{name: data for name, data in graphs.items() if data is not None}}
        return {name: data.read_bytes() if isinstance(data, Path) else data for name, data in members.items()}

    @classmethod
    def fresh(cls, key: str, plan: bytes, record: BuildRecord, processed_onnx: bytes | None = None,
              reference_onnx: bytes | None = None) -> Built:
        return cls(key=key, plan=plan, processed_onnx=processed_onnx, reference_onnx=reference_onnx, record=record,
                   engine_sha256=hashlib.sha256(plan).hexdigest())

    @classmethod
    def from_entry(cls, entry: CacheEntry) -> Built:
        paths = entry.paths
        return cls(key=entry.key, plan=paths["engine"], processed_onnx=paths.get("processed.onnx"),
                   reference_onnx=paths.get("reference.onnx"), record=BuildRecord.from_dict(json.loads(entry.read("record.json"))),
                   engine_sha256=entry.sha256("engine"), hit=True)


def build_record(result: BuildResult, config: CompileConfig, precision: PrecisionRecord, notes: list[str], *,
                 source: SourceRecord, quantization: QuantizationRecord | None = None,
                 converter_hash: str | None = None, target_plan: Mapping[str, Any] | None = None) -> BuildRecord:
    """The typed record of one build (the sidecar's inputs, outputs, profiles, precision, builder), plus the
    path's own facts (graph hashes or ``path="direct"``, quantization, the converters' hash)."""
    inputs, outputs = static_io(result.inputs, result.outputs, result.profiles)
    created = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    builder = replace(result.builder, created=created, config=json.loads(json.dumps(config.record_fields())),
                      trtforge_version=__version__, converter_hash=converter_hash)
    return BuildRecord(inputs=inputs, outputs=outputs, profiles=result.profiles, precision=precision,
                       builder=builder, source=source, notes=tuple(notes), quantization=quantization,
                       shape_inputs=tuple(ShapeInputRecord(name=k, values=v) for k, v in result.shape_values.items()),
                       target_plan=None if target_plan is None else TargetPlanRecord.from_dict(target_plan))


def graph_edits_record(config: CompileConfig) -> GraphEditsRecord | None:
    """The sidecar's ``graph_edits``: the request's cut (``--outputs``) and NMS (``--nms``), the NMS's unrolled
    rounds and outputs; None when the build asked for neither.

    Example:
        >>> graph_edits_record(CompileConfig(postprocess=NMS("yolo"))).nms.outputs
        ('num_detections', 'detection_boxes', 'detection_scores', 'detection_classes')
    """
    if not config.outputs and config.postprocess is None:
        return None
    nms = None
    if config.postprocess is not None:
        from trtforge.passes.nms import NMS_ROUNDS

        nms = NMSRecord(**config.postprocess.as_dict(), rounds=NMS_ROUNDS, outputs=config.postprocess.output_names)
    return GraphEditsRecord(outputs=tuple(config.outputs) if config.outputs else None, nms=nms)


def static_io(inputs: tuple[TensorSpec, ...], outputs: tuple[TensorSpec, ...],
               profiles: tuple[dict, ...]) -> tuple[tuple[TensorSpec, ...], tuple[TensorSpec, ...]]:
    """With one profile of fixed shapes, the inputs take its shapes and outputs their batch at a dynamic dim 0."""
    if len(profiles) != 1 or any(p["min"] != p["max"] for p in profiles[0].values()):
        return inputs, outputs
    (profile,) = profiles
    batches = {profile[s.name]["min"][0] for s in inputs if s.shape and s.shape[0] < 0 and s.name in profile}
    batch = batches.pop() if len(batches) == 1 else None
    fixed_inputs = tuple(TensorSpec(s.name, s.dtype, tuple(profile[s.name]["min"])) if s.name in profile else s
                         for s in inputs)
    fixed_outputs = tuple(TensorSpec(s.name, s.dtype, (batch, *s.shape[1:]))
                          if batch is not None and s.shape and s.shape[0] < 0 else s for s in outputs)
    return fixed_inputs, fixed_outputs
