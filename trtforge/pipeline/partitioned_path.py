"""The direct path, partitioned: ``compile(model, inputs, path="direct", min_block_size=N)`` (or
``torch_executed_ops=``) keeps the ops with no converter (and the named ones) in PyTorch, builds the
supported runs with the one builder, and writes the partitioned module's folder.

The folder (``trtforge.convert.saved``) is staged beside its destination and moved in whole: a full
disk or Ctrl-C leaves the old folder (or none), never half of one. An existing folder that trtforge
did not write is refused before any work.

Each engine part goes through the engine cache like a whole-model build: its key hashes the part's own
recorded network, the config it is built with (its shapes the part's), the converters' source and the
toolchain, so a repeated compile builds nothing, and a change of ``torch_executed_ops`` or
``min_block_size`` rebuilds only the parts whose graphs it changed.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Any

from trtforge.artifact import PartitionedArtifact
from trtforge.cache.engine_cache import EngineCache, engine_key
from trtforge.capture.export import normalize_example_inputs
from trtforge.core.atomic import folder_lock
from trtforge.core.config import CompileConfig
from trtforge.core.errors import FileConflict, WrongType
from trtforge.pipeline.paths import OutputPaths
from trtforge.pipeline.store import cached_build, direct_converter_hash


def partitioned_folder(paths: OutputPaths) -> Path:
    """Where a partitioned build of ``paths.name`` goes: ``<name>_<precision><suffix>_partitioned/``."""
    return paths.directory / f"{paths.name}_{paths.precision}{paths.suffix}_partitioned"


def check_partitioned_folder(folder: Path) -> None:
    """Refuse, before any work, a destination that is not a folder trtforge wrote."""
    from trtforge.convert.saved import MANIFEST

    if folder.exists() and not (folder / MANIFEST).is_file():
        raise FileConflict(f"{folder} exists and holds no trtforge {MANIFEST}; refusing to replace what trtforge "
                           "did not write. Move it away or choose another name= or output_dir")


class CachedPartBuilder:
    """Builds engine parts through the engine cache: a part whose key is stored is read back, not built; a
    fresh one is stored (a cache that cannot store warns once). ``hits`` names the parts served from it."""

    def __init__(self, engine_cache: EngineCache, config: CompileConfig) -> None:
        self.engine_cache, self.model = engine_cache, config.name
        self.converter_hash = direct_converter_hash(config)
        self.hits: list[str] = []

    def __call__(self, net: Any, config: CompileConfig, name: str) -> Any:
        from trtforge.convert.partition import PartBuild, build_part

        key = engine_key(net.record.canonical(), config, network_name=name, converter_hash=self.converter_hash)

        def read(entry: Any) -> PartBuild:
            self.hits.append(name)
            return PartBuild.from_entry(entry)

        def meta(part: PartBuild) -> dict:
            return {"model": f"{self.model}/{name}", "precision": config.precision, "targets": list(config.targets),
                    "options": "partitioned", "engine_size": len(part.plan)}

        return cached_build(self.engine_cache, key, lambda: build_part(net, config, name), read=read, meta=meta)


def compile_partitioned(model: Any, example_inputs: Any, config: CompileConfig, paths: OutputPaths,
                        engine_cache: EngineCache | None = None) -> PartitionedArtifact:
    """Partition ``model`` with ``config`` (``trtforge.convert.partition.partition_module``), build its
    engine parts (through ``engine_cache`` when there is one), and move the saved folder in whole."""
    from trtforge.convert.partition import build_part, partition_module
    from trtforge.convert.saved import save_partitioned

    args, kwargs = normalize_example_inputs(model, example_inputs)
    if kwargs:
        raise WrongType("path='direct' takes positional example inputs; pass a tuple of tensors in forward's order")
    folder = partitioned_folder(paths)
    check_partitioned_folder(folder)
    builder = CachedPartBuilder(engine_cache, config) if engine_cache is not None else build_part
    module, report = partition_module(model, tuple(args), config, builder=builder)
    with contextlib.ExitStack() as stack:
        staging = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=".trtforge-", dir=paths.directory)))
        save_partitioned(staging / "new", module, report)
        with folder_lock(paths.directory):
            check_partitioned_folder(folder)  # again, under the lock
            if folder.exists():
                os.replace(folder, staging / "old")  # the old folder goes with the staging folder
            os.replace(staging / "new", folder)
    hits = tuple(builder.hits) if isinstance(builder, CachedPartBuilder) else ()
    return PartitionedArtifact(folder=folder, engines=tuple(report.engines), pytorch=dict(report.pytorch),
                               cache_hits=hits)


