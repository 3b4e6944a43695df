"""Output-path policy: where one build writes, its default name, and what it refuses to overwrite."""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trtforge.core.config import MAX_NAME_LENGTH
from trtforge.core.errors import FileConflict, NotAFolder, NotPermitted
from trtforge.core.sidecar import check_writable


@dataclass(frozen=True)
class OutputPaths:
    """Where one build writes; every path is checked before work starts."""

    directory: Path
    name: str
    precision: str
    #: Portability options (targets, hardware level, ...), so they never overwrite the default engine.
    suffix: str = ""

    def engine(self, precision: str | None = None) -> Path:
        return self.directory / f"{self.name}_{precision or self.precision}{self.suffix}.engine"

    def sidecar(self, precision: str | None = None) -> Path:
        return self.directory / f"{self.name}_{precision or self.precision}{self.suffix}.json"

    def onnx(self, precision: str | None = None) -> Path:
        return self.directory / f"{self.name}_{precision or self.precision}{self.suffix}.onnx"

    def reference_onnx(self) -> Path:
        return self.directory / f"{self.name}_reference_fp32.onnx"


#: Verbs a factory's name may start with that say nothing of the model (``make_regnet`` → ``regnet``).
FACTORY_VERBS = ("make_", "build_", "create_", "get_", "load_", "new_")


def default_name(model_or_onnx: Any) -> str:
    """The one default file-name stem of a build, whatever its path (ONNX or direct) or entry (CLI or Python):
    a file's stem; for a module its ``trtforge_name``, else the name of the factory that made it
    (``trtforge build pkg.mod:regnet`` sets ``trtforge_factory``: ``regnet``; ``make_``-like verbs dropped), else
    its class; class-like names in snake case (``RegNetModel`` → ``reg_net_model``, ``MLPHead`` → ``mlp_head``).
    Made valid as a file name (``_best.onnx`` → ``best``).

    Example:
        >>> default_name(Path("_best.onnx")), default_name(Path("[x].onnx"))
        ('best', 'x')
    """
    if isinstance(model_or_onnx, (str, Path)):
        stem = Path(model_or_onnx).stem
    else:
        factory = getattr(model_or_onnx, "trtforge_factory", None)
        function = str(factory).rpartition(":")[2].rpartition(".")[2] if factory else ""
        for verb in FACTORY_VERBS:
            function = function[len(verb):] if function.startswith(verb) and len(function) > len(verb) else function
        stem = getattr(model_or_onnx, "trtforge_name", None) or snake_case(function or type(model_or_onnx).__name__)
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", stem).lstrip("._-")[:MAX_NAME_LENGTH].rstrip("._-")
    return stem or "model"


def snake_case(name: str) -> str:
    """``RegNetModel`` → ``reg_net_model``, ``MLPHead`` → ``mlp_head``, ``regnet`` stays ``regnet``.

    Acronyms stay whole: a word breaks before a capitalised word (``Net``), before an acronym of two letters or more
    (``MobileBERT`` → ``mobile_bert``) and where an acronym ends in a word of two lowercase letters or more
    (``BERTEncoder`` → ``bert_encoder``); one capital after lowercase stays with it (``ViT`` → ``vit``), as does a
    version after an acronym (``YOLOv8`` → ``yolov8``).

    Example:
        >>> snake_case("ViTForImageClassification"), snake_case("YOLOv8")
        ('vit_for_image_classification', 'yolov8')
    """
    return SNAKE_BREAKS.sub("_", name).lower()


#: Where :func:`snake_case` puts an underscore (see its docstring).
SNAKE_BREAKS = re.compile(
    r"(?<=[a-z0-9])(?=[A-Z][a-z])"  # before a capitalised word: Reg|Net
    r"|(?<=[a-z0-9])(?=[A-Z]{2,}(?![a-z]))"  # before an acronym: Mobile|BERT, not Vi|TModel
    r"|(?<=[A-Z])(?=[A-Z][a-z]{2})"  # after an acronym, before a word: MLP|Head, ViT|Model, not YOL|Ov8
)


def prepare_output_dir(directory: Path) -> Path:
    """Create ``directory`` if needed and prove it is writable, before any expensive work."""
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise NotAFolder(f"output_dir {directory} is a file; pass a folder")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".trtforge-write-check-"):
            pass
    except OSError as exc:
        raise NotPermitted(
            f"output_dir {directory} is not writable ({exc.strerror or exc}); choose another output_dir"
        ) from exc
    return directory


def check_destinations(paths: OutputPaths, precisions: Sequence[str]) -> None:
    """Refuse to overwrite engines, sidecars or graphs that trtforge did not write."""
    for precision in precisions:
        sidecar = paths.sidecar(precision)
        check_writable(sidecar)
        for other in (paths.engine(precision), paths.onnx(precision)):
            if other.exists() and not sidecar.exists():
                raise FileConflict(
                    f"{other} exists without a trtforge sidecar beside it; refusing to overwrite a file "
                    "trtforge did not write. Move it away or choose another name= or output_dir."
                )


def source_info(model_or_onnx: Any) -> dict:
    """The sidecar's ``source`` facts that need no capture."""
    if isinstance(model_or_onnx, (str, Path)):
        return {"kind": "onnx", "original": str(model_or_onnx)}
    source = {"kind": "torch", "module": type(model_or_onnx).__qualname__}
    factory = getattr(model_or_onnx, "trtforge_factory", None)
    if factory:
        source["factory"] = factory
    return source


@contextlib.contextmanager
def removed_if_left_empty(directory: Path | str) -> Iterator[None]:
    """The folders of ``directory`` that do not exist yet (it, and parents ``mkdir(parents=True)`` would make)
    are removed again when the block fails (an error or Ctrl-C) and leaves them without a file; a folder that
    existed before, or one holding any file, is kept.

    Example:
        >>> with removed_if_left_empty("new/out"):
        ...     Path("new/out").mkdir(parents=True); raise KeyboardInterrupt
        >>> Path("new").exists()
        False
    """
    if not isinstance(directory, (str, os.PathLike)):  # not a path: validate refuses it, nothing was made
        yield
        return
    directory = Path(directory).absolute()
    created = None
    for folder in (directory, *directory.parents):
        if os.path.lexists(folder):
            break
        created = folder
    try:
        yield
    except BaseException:
        if created is not None and created.is_dir() and not created.is_symlink():
            _remove_empty_folders(created)
        raise


def _remove_empty_folders(top: Path) -> None:
    """``top`` and the folders under it, deepest first, each only while it is empty (never a file)."""
    for root, _dirs, _files in sorted(os.walk(top), key=lambda entry: -len(Path(entry[0]).parts)):
        with contextlib.suppress(OSError):  # not empty (a file, or a folder kept below it): kept
            os.rmdir(root)
