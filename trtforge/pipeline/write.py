"""Writing the artifact: every file staged, the sidecar moved in last, under a lock on the folder."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from trtforge.artifact import Artifact
from trtforge.core.atomic import Payload, atomic_write_all, folder_lock
from trtforge.core.config import CompileConfig
from trtforge.core.sidecar import Sidecar, SourceRecord, check_writable, sidecar_bytes
from trtforge.pipeline.paths import OutputPaths, source_info
from trtforge.pipeline.record import Built, graph_edits_record
from trtforge.pipeline.validate import check_same_build, check_same_model


def write_artifact(model_or_onnx: Any, config: CompileConfig, paths: OutputPaths, built: Built, *,
                   cached: bool) -> Artifact:
    """Every file staged, then moved in with the sidecar last, under a lock on the folder (checks repeated there)."""
    with folder_lock(paths.directory):
        return _write_locked(model_or_onnx, config, paths, built, cached=cached)


def _write_locked(model_or_onnx: Any, config: CompileConfig, paths: OutputPaths, built: Built, *,
                  cached: bool) -> Artifact:
    record = built.record
    built_precision = record.precision.built
    if not config.overwrite:  # again, under the lock: a concurrent build may have written this name meanwhile
        check_same_build(paths.sidecar(built_precision), config, source_info(model_or_onnx))
    engine_path = paths.engine(built_precision)
    onnx_path = reference_path = None
    source = SourceRecord(**source_info(model_or_onnx))
    files: list[tuple[Path, Payload, int | None]] = []
    if built.processed_onnx is not None:  # the ONNX path; the direct path makes no ONNX
        check_same_model(paths, record.source.reference_onnx_sha256, config.overwrite)
        onnx_path, reference_path = paths.onnx(built_precision), paths.reference_onnx()
        files = [(onnx_path, built.processed_onnx, None), (reference_path, built.reference_onnx, None)]
        source = replace(source, onnx_file=onnx_path.name, reference_onnx_file=reference_path.name)
    cache_info = {"key": built.key, "hit": built.hit} if cached else {"enabled": False}
    sidecar = Sidecar(name=config.name, engine_file=engine_path.name, engine_size=built.engine_size,
                      engine_sha256=built.engine_sha256, preprocessing=config.preprocessing,
                      build=record.for_engine(source=source, notes=tuple(config.notes), cache=cache_info),
                      graph_edits=graph_edits_record(config))
    sidecar_path = paths.sidecar(built_precision)
    check_writable(sidecar_path)
    # Every file is staged first and the sidecar moved in last: a full disk or Ctrl-C leaves none.
    atomic_write_all([(engine_path, built.plan, None), *files, (sidecar_path, sidecar_bytes(sidecar), None)])
    return Artifact(engine_path=engine_path, sidecar_path=sidecar_path, onnx_path=onnx_path,
                    reference_onnx_path=reference_path, sidecar=Sidecar.from_dict(sidecar.to_dict(), sidecar_path))
