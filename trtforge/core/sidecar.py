"""The JSON sidecar that travels with every engine and describes it to any consumer.

The sidecar is plain JSON so that C++, Triton or a shell script can read it without trtforge.
Readers ignore keys they do not know; ``extra`` keeps them for round trips.

Example:
    >>> sc = read_sidecar(Path("trtforge_out/efficientnet_lite0_fp16.json"))
    >>> sc.inputs[0].shape
    (-1, 3, 224, 224)
    >>> sc.verify_engine()        # raises EngineHashMismatch when the bytes changed
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from trtforge._version import __version__
from trtforge.core.atomic import atomic_write_bytes
from trtforge.core.errors import InvalidArgument, MissingFile
from trtforge.core.specs import TensorSpec

SCHEMA_VERSION = 1
GENERATOR = "trtforge"


class EngineHashMismatch(InvalidArgument):
    """The engine's bytes do not match the sha256 recorded in its sidecar."""


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class Sidecar:
    """Everything a consumer needs to know about one engine file."""

    name: str
    engine_file: str
    engine_size: int
    engine_sha256: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    profiles: tuple[dict[str, dict[str, list[int]]], ...]
    precision: dict[str, Any]
    builder: dict[str, Any]
    source: dict[str, Any]
    preprocessing: dict[str, Any] | None = None
    notes: tuple[str, ...] = ()
    quantization: dict[str, Any] | None = None
    trtforge_version: str = __version__
    schema_version: int = SCHEMA_VERSION
    extra: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None

    # -- derived ---------------------------------------------------------------------------
    @property
    def engine_path(self) -> Path:
        base = self.path.parent if self.path is not None else Path(".")
        return base / self.engine_file

    def verify_engine(self) -> Path:
        """Check the engine's size and sha256 against this sidecar; return its path."""
        engine = self.engine_path
        if not engine.is_file():
            raise FileNotFoundError(f"engine {engine} named by sidecar {self.path} does not exist")
        size = engine.stat().st_size
        digest = sha256_file(engine)
        if size != self.engine_size or digest != self.engine_sha256:
            raise EngineHashMismatch(
                f"engine {engine} does not match its sidecar {self.path}: sha256 {digest[:12]}… "
                f"({size} bytes), expected {self.engine_sha256[:12]}… ({self.engine_size} bytes). "
                "The engine was replaced or corrupted; rebuild it with trtforge build."
            )
        return engine

    # -- (de)serialisation -----------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = dict(self.extra)
        data.update(
            {
                "schema_version": self.schema_version,
                "generator": GENERATOR,
                "trtforge_version": self.trtforge_version,
                "name": self.name,
                "source": self.source,
                "engine": {
                    "file": self.engine_file,
                    "size": self.engine_size,
                    "sha256": self.engine_sha256,
                },
                "inputs": [s.as_dict() for s in self.inputs],
                "outputs": [s.as_dict() for s in self.outputs],
                "profiles": list(self.profiles),
                "precision": self.precision,
                "builder": self.builder,
                "preprocessing": self.preprocessing,
                "notes": list(self.notes),
            }
        )
        if self.quantization is not None:
            data["quantization"] = self.quantization
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any], path: Path | None = None) -> Sidecar:
        known = {
            "schema_version", "generator", "trtforge_version", "name", "source", "engine",
            "inputs", "outputs", "profiles", "precision", "builder", "preprocessing", "notes",
            "quantization",
        }
        engine = data["engine"]
        notes = data.get("notes") or ()
        return cls(
            name=data["name"],
            engine_file=engine["file"],
            engine_size=int(engine["size"]),
            engine_sha256=engine["sha256"],
            inputs=tuple(TensorSpec.from_dict(s) for s in data["inputs"]),
            outputs=tuple(TensorSpec.from_dict(s) for s in data["outputs"]),
            profiles=tuple(data.get("profiles", ())),
            precision=dict(data.get("precision", {})),
            builder=dict(data.get("builder", {})),
            source=dict(data.get("source", {})),
            preprocessing=data.get("preprocessing"),
            notes=(notes,) if isinstance(notes, str) else tuple(notes),
            quantization=data.get("quantization"),
            trtforge_version=data.get("trtforge_version", "unknown"),
            schema_version=int(data.get("schema_version", SCHEMA_VERSION)),
            extra={k: v for k, v in data.items() if k not in known},
            path=path,
        )

    def with_engine(self, engine: Path) -> Sidecar:
        """A copy whose engine fields describe the file at ``engine`` (name, size, sha256)."""
        return replace(
            self, engine_file=engine.name, engine_size=engine.stat().st_size,
            engine_sha256=sha256_file(engine),
        )


def is_trtforge_sidecar(path: Path) -> bool:
    """True when ``path`` is a JSON file that trtforge wrote."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("generator") == GENERATOR


def check_writable(path: Path) -> None:
    """Refuse to overwrite a file at ``path`` that trtforge did not write."""
    if path.exists() and not is_trtforge_sidecar(path):
        raise FileExistsError(
            f"{path} exists and was not written by trtforge; refusing to overwrite it. "
            "Move it away, or choose another name= or output directory."
        )


def write_sidecar(path: Path, sidecar: Sidecar) -> Path:
    """Write ``sidecar`` as JSON at ``path`` atomically, with the engine's permission bits.

    Raises FileExistsError when ``path`` holds a JSON that trtforge did not write.
    """
    path = Path(path)
    check_writable(path)
    mode = None
    engine = path.parent / sidecar.engine_file
    if engine.exists():
        mode = stat.S_IMODE(os.stat(engine).st_mode)
    text = json.dumps(sidecar.to_dict(), indent=2, sort_keys=False) + "\n"
    atomic_write_bytes(path, text.encode(), mode=mode)
    return path


def read_sidecar(path: Path) -> Sidecar:
    """Read a sidecar; ``path`` may be the ``.json`` or the ``.engine`` beside it."""
    path = Path(path)
    if path.suffix != ".json":
        path = path.with_suffix(".json")
    if not path.is_file():
        raise MissingFile(f"no sidecar at {path}; every trtforge engine has a .json beside it")
    try:
        data = json.loads(path.read_text())
    except ValueError as exc:
        raise ValueError(f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict) or data.get("generator") != GENERATOR:
        raise ValueError(f"{path} is not a trtforge sidecar (no \"generator\": \"trtforge\")")
    return Sidecar.from_dict(data, path=path)
