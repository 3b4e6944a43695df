"""The direct path, partitioned: ``compile(model, inputs, path="direct", min_block_size=N)`` (or
``torch_executed_ops=``) keeps the ops with no converter (and the named ones) in PyTorch, builds the
supported runs with the one builder, and writes the partitioned module's folder.

The folder (``trtforge.convert.saved``) is staged beside its destination and moved in whole: a full
disk or Ctrl-C leaves the old folder (or none), never half of one. An existing folder that trtforge
did not write is refused before any work. The engine cache does not hold partitioned builds (each
compile builds its engine parts again).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Any

from trtforge.artifact import PartitionedArtifact
from trtforge.capture.export import normalize_example_inputs
from trtforge.core.atomic import folder_lock
from trtforge.core.config import CompileConfig
from trtforge.core.errors import FileConflict, WrongType
from trtforge.pipeline.paths import OutputPaths


def partitioned_folder(paths: OutputPaths) -> Path:
    """Where a partitioned build of ``paths.name`` goes: ``<name>_<precision><suffix>_partitioned/``."""
    return paths.directory / f"{paths.name}_{paths.precision}{paths.suffix}_partitioned"


def check_partitioned_folder(folder: Path) -> None:
    """Refuse, before any work, a destination that is not a folder trtforge wrote."""
    from trtforge.convert.saved import MANIFEST

    if folder.exists() and not (folder / MANIFEST).is_file():
        raise FileConflict(f"{folder} exists and holds no trtforge {MANIFEST}; refusing to replace what trtforge "
                           "did not write. Move it away or choose another name= or output_dir")


def compile_partitioned(model: Any, example_inputs: Any, config: CompileConfig, paths: OutputPaths
                        ) -> PartitionedArtifact:
    """Partition ``model`` with ``config`` (``trtforge.convert.partition.partition_module``), build its
    engine parts, and move the saved folder in whole."""
    from trtforge.convert.partition import partition_module
    from trtforge.convert.saved import save_partitioned

    args, kwargs = normalize_example_inputs(model, example_inputs)
    if kwargs:
        raise WrongType("path='direct' takes positional example inputs; pass a tuple of tensors in forward's order")
    folder = partitioned_folder(paths)
    check_partitioned_folder(folder)
    module, report = partition_module(model, tuple(args), config)
    with contextlib.ExitStack() as stack:
        staging = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=".trtforge-", dir=paths.directory)))
        save_partitioned(staging / "new", module, report)
        with folder_lock(paths.directory):
            check_partitioned_folder(folder)  # again, under the lock
            if folder.exists():
                os.replace(folder, staging / "old")  # the old folder goes with the staging folder
            os.replace(staging / "new", folder)
    return PartitionedArtifact(folder=folder, engines=tuple(report.engines), pytorch=dict(report.pytorch))


