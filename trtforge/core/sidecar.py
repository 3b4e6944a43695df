"""The JSON sidecar that travels with every engine and describes it to any consumer.

The sidecar is plain JSON so that C++, Triton or a shell script can read it without trtforge.
Readers ignore keys they do not know; ``extra`` keeps them for round trips.

Its sub-records (``source``, ``engine``, ``precision``, ``builder``, ``quantization``, and
``preprocessing``: the one ``PreprocessConfig``) are frozen dataclasses; ``profiles`` are plain JSON
(int lists per input, normalised on read), as every route and TensorRT itself reads them.

Example:
    >>> sc = read_sidecar(Path("trtforge_out/efficientnet_lite0_fp16.json"))
    >>> sc.inputs[0].shape, sc.precision.built, sc.builder.flavour
    ((-1, 3, 224, 224), 'fp16', 'tensorrt_rtx')
    >>> sc.verify_engine()        # raises EngineHashMismatch when the bytes changed
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from trtforge._version import __version__
from trtforge.core.atomic import atomic_write_bytes
from trtforge.core.errors import FileConflict, InvalidArgument, MissingFile, WrongType
from trtforge.core.hashing import sha256_file
from trtforge.core.preprocessing import PreprocessConfig
from trtforge.core.specs import TensorSpec

SCHEMA_VERSION = 1
GENERATOR = "trtforge"


class EngineHashMismatch(InvalidArgument):
    """The engine's bytes do not match the sha256 recorded in its sidecar."""


#: Field metadata: an optional key, written only when it holds a value (older sidecars lack it).
_OPTIONAL = {"optional": True}


def _optional(default: Any = None) -> Any:
    return field(default=default, metadata=_OPTIONAL)


def _json(value: Any) -> Any:
    """Tuples back to JSON lists, recursively (records keep string lists as tuples)."""
    if isinstance(value, (list, tuple)):
        return [_json(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _json(v) for k, v in value.items()}
    return value


def _tuple(value: Any) -> tuple:
    return tuple(value) if isinstance(value, (list, tuple)) else (() if value is None else (value,))


@dataclass(frozen=True, kw_only=True)
class SidecarRecord:
    """Base of the sidecar's sub-records: typed fields, and ``extra`` for keys this version does not know.

    Example:
        >>> BuilderRecord.from_dict({"flavour": "tensorrt_rtx", "new_key": 1}).extra
        {'new_key': 1}
    """

    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | SidecarRecord | None) -> Any:
        """A record from its JSON object; missing keys get their defaults, unknown keys go to ``extra``."""
        if isinstance(data, cls):
            return data
        if data is None:
            data = {}
        if not isinstance(data, Mapping):
            raise WrongType(f"a sidecar {cls.__name__} is a JSON object, got {type(data).__name__}; "
                            "pass a dict or the record itself")
        names = {f.name for f in fields(cls)} - {"extra"}
        known = {k: v for k, v in data.items() if k in names}
        return cls(**known, extra={k: v for k, v in data.items() if k not in names})

    def to_dict(self) -> dict[str, Any]:
        """The JSON object: every field (optional ones only when set), then the unknown keys."""
        data: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "extra" or (value is None and f.metadata.get("optional")):
                continue
            data[f.name] = _json(value)
        data.update(self.extra)
        return data


@dataclass(frozen=True, kw_only=True)
class SourceRecord(SidecarRecord):
    """Where the engine came from: the model or file, and the ONNX graphs written beside the engine."""

    kind: str | None = _optional()  # "torch" or "onnx"
    original: str | None = _optional()  # the ONNX file given
    module: str | None = _optional()  # the nn.Module's class
    factory: str | None = _optional()  # "package.module:function" that rebuilds the model (zoo models)
    onnx_file: str | None = _optional()  # the processed graph the engine was built from
    onnx_sha256: str | None = _optional()
    reference_onnx_file: str | None = _optional()  # the FP32 graph before the precision passes
    reference_onnx_sha256: str | None = _optional()
    #: "direct": converted from PyTorch without ONNX (trtforge.convert), so no .onnx lies beside the engine.
    path: str | None = _optional()


@dataclass(frozen=True, kw_only=True)
class EngineRecord(SidecarRecord):
    """The engine file beside the sidecar: its name, size and sha256."""

    file: str
    size: int
    sha256: str


@dataclass(frozen=True, kw_only=True)
class PrecisionRecord(SidecarRecord):
    """The precision asked for, the one built, and the graph's node dtypes."""

    requested: str | None = _optional()
    built: str | None = _optional()  # differs from requested when INT8 placement kept every layer FP16
    node_dtypes: Mapping[str, int] = field(default_factory=dict)
    fp32_nodes: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class BuilderRecord(SidecarRecord):
    """How TensorRT built the engine: flavour, version, targets, portability and cache facts."""

    flavour: str | None = _optional()  # "tensorrt" or "tensorrt_rtx"
    version: str | None = _optional()
    targets: tuple[str, ...] = ()
    offered_targets: tuple[str, ...] = ()
    optimization_level: int | None = _optional()
    workspace_bytes: int | None = _optional()
    strongly_typed: bool | None = _optional()
    hardware_compatibility: str | None = None
    version_compatible: bool = False
    host_code: bool = False
    refittable: bool = False
    weights_stripped: bool = False
    timing_cache: bool | None = _optional()
    build_seconds: float | None = _optional()
    created: str | None = _optional()
    config: Mapping[str, Any] | None = _optional()
    trtforge_version: str | None = _optional()
    cache: Mapping[str, Any] | None = _optional()  # {"key", "hit"}, or {"enabled": False}
    refit: Mapping[str, Any] | None = _optional()  # the last refit: weights, sha256, count, time
    converter_hash: str | None = _optional()  # the direct path: sha256 of the converters' source

    def __post_init__(self) -> None:
        object.__setattr__(self, "targets", _tuple(self.targets))
        object.__setattr__(self, "offered_targets", _tuple(self.offered_targets))


@dataclass(frozen=True, kw_only=True)
class QuantizationRecord(SidecarRecord):
    """The INT8 report: calibration, placement, and the error measured on held-back samples."""

    calibrator: str | None = None
    percentile: float | None = None
    smoothquant_alpha: float | None = None
    bias_correction: Any = None  # the option asked for; a dict of what it did once applied
    placement: str | None = None
    task: str | None = None
    samples: Mapping[str, int] | None = None
    smoothquant: Any = _optional()
    cache: str | None = _optional()
    sensitivity: Any = _optional()
    auto_placement: Mapping[str, Any] | None = _optional()
    measured: Mapping[str, Any] | None = _optional()
    error_budget: Mapping[str, Any] | None = _optional()
    coverage: Any = _optional()  # the INT8 share of MACs (older reports: a dict of shares)
    int8_layers: int | None = _optional()
    layers_total: int | None = _optional()
    excluded_layers: list[Mapping[str, str]] | None = _optional()  # {"layer", "reason"} each
    graph_sha256: str | None = _optional()
    data_sha256: str | None = _optional()


#: One dict per optimization profile: {input name: {"min": [...], "opt": [...], "max": [...]}}.
ProfileRecord = dict[str, dict[str, list[int]]]


def _profiles(value: Any) -> tuple[ProfileRecord, ...]:
    """Profiles as plain JSON (int lists), whatever sequences they came in."""
    return tuple(
        {name: {k: [int(d) for d in dims] for k, dims in ranges.items()} for name, ranges in profile.items()}
        for profile in value or ()
    )


@dataclass(frozen=True)
class Sidecar:
    """Everything a consumer needs to know about one engine file.

    The sub-records accept plain dicts (the JSON objects) and are stored typed.

    Example:
        >>> sc = Sidecar(name="m", engine_file="m.engine", engine_size=1, engine_sha256="0" * 64,
        ...              inputs=(), outputs=(), profiles=(), precision={"built": "fp16"},
        ...              builder={"flavour": "tensorrt_rtx"}, source={"kind": "onnx"})
        >>> sc.precision.built, sc.builder.host_code
        ('fp16', False)
    """

    name: str
    engine_file: str
    engine_size: int
    engine_sha256: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    profiles: tuple[ProfileRecord, ...]
    precision: PrecisionRecord
    builder: BuilderRecord
    source: SourceRecord
    preprocessing: PreprocessConfig | None = None
    notes: tuple[str, ...] = ()
    quantization: QuantizationRecord | None = None
    trtforge_version: str = __version__
    schema_version: int = SCHEMA_VERSION
    extra: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "outputs", tuple(self.outputs))
        object.__setattr__(self, "profiles", _profiles(self.profiles))
        object.__setattr__(self, "precision", PrecisionRecord.from_dict(self.precision))
        object.__setattr__(self, "builder", BuilderRecord.from_dict(self.builder))
        object.__setattr__(self, "source", SourceRecord.from_dict(self.source))
        object.__setattr__(self, "notes", (self.notes,) if isinstance(self.notes, str) else tuple(self.notes))
        if self.quantization is not None:
            object.__setattr__(self, "quantization", QuantizationRecord.from_dict(self.quantization))
        if self.preprocessing is not None:
            object.__setattr__(self, "preprocessing", PreprocessConfig.of(self.preprocessing))

    @property
    def engine(self) -> EngineRecord:
        """The engine file's record: ``file``, ``size``, ``sha256``."""
        return EngineRecord(file=self.engine_file, size=self.engine_size, sha256=self.engine_sha256)

    # -- derived ---------------------------------------------------------------------------
    @property
    def engine_path(self) -> Path:
        base = self.path.parent if self.path is not None else Path(".")
        return base / self.engine_file

    def verify_engine(self) -> Path:
        """Check the engine's size and sha256 against this sidecar; return its path."""
        engine = self.engine_path
        if not engine.is_file():
            raise MissingFile(f"engine {engine} named by sidecar {self.path} does not exist")
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
                "source": self.source.to_dict(),
                "engine": self.engine.to_dict(),
                "inputs": [s.as_dict() for s in self.inputs],
                "outputs": [s.as_dict() for s in self.outputs],
                "profiles": list(self.profiles),
                "precision": self.precision.to_dict(),
                "builder": self.builder.to_dict(),
                "preprocessing": None if self.preprocessing is None else self.preprocessing.to_dict(),
                "notes": list(self.notes),
            }
        )
        if self.quantization is not None:
            data["quantization"] = self.quantization.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any], path: Path | None = None) -> Sidecar:
        known = {
            "schema_version", "generator", "trtforge_version", "name", "source", "engine",
            "inputs", "outputs", "profiles", "precision", "builder", "preprocessing", "notes",
            "quantization",
        }
        engine = EngineRecord.from_dict(data["engine"])
        return cls(
            name=data["name"],
            engine_file=engine.file,
            engine_size=int(engine.size),
            engine_sha256=engine.sha256,
            inputs=tuple(TensorSpec.from_dict(s) for s in data["inputs"]),
            outputs=tuple(TensorSpec.from_dict(s) for s in data["outputs"]),
            profiles=data.get("profiles") or (),
            precision=data.get("precision"),
            builder=data.get("builder"),
            source=data.get("source"),
            preprocessing=data.get("preprocessing"),
            notes=data.get("notes") or (),
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
        raise FileConflict(
            f"{path} exists and was not written by trtforge; refusing to overwrite it. "
            "Move it away, or choose another name= or output directory."
        )


def write_sidecar(path: Path, sidecar: Sidecar) -> Path:
    """Write ``sidecar`` as JSON at ``path`` atomically, with the engine's permission bits.

    Raises FileConflict (a FileExistsError) when ``path`` holds a JSON that trtforge did not write.
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
        raise InvalidArgument(f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict) or data.get("generator") != GENERATOR:
        raise InvalidArgument(f"{path} is not a trtforge sidecar (no \"generator\": \"trtforge\")")
    return Sidecar.from_dict(data, path=path)
