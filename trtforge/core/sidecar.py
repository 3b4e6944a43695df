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
from trtforge.core.build_record import (  # noqa: F401  (re-exported: ProfileRecord, normalize_profiles)
    BuildRecord,
    ProfileRecord,
    normalize_profiles,
)
from trtforge.core.errors import (
    FileConflict,
    InvalidArgument,
    MissingFile,
    NotPermitted,
    Unsupported,
)
from trtforge.core.hashing import sha256_file
from trtforge.core.preprocessing import PreprocessConfig
from trtforge.core.sidecar_records import (  # noqa: F401  (re-exported: the records are this module's API)
    BuilderRecord,
    EngineRecord,
    GraphEditsRecord,
    NMSRecord,
    PrecisionRecord,
    QuantizationRecord,
    ShapeInputRecord,
    SidecarRecord,
    SourceRecord,
    TargetPlanRecord,
    TunedRecord,
)
from trtforge.core.specs import TensorSpec

SCHEMA_VERSION = 1
GENERATOR = "trtforge"


class EngineHashMismatch(InvalidArgument):
    """The engine's bytes do not match the sha256 recorded in its sidecar."""


class MalformedSidecar(InvalidArgument):
    """A sidecar that lacks a required key, holds a wrong type, or names a file outside its folder."""


#: What a sidecar must hold: (path of keys, JSON types, what it is). Checked before any field is read.
REQUIRED_KEYS: tuple[tuple[tuple[str, ...], tuple[type, ...], str], ...] = (
    (("name",), (str,), "a string"),
    (("engine",), (dict,), "an object"),
    (("engine", "file"), (str,), "a file name"),
    (("engine", "size"), (int,), "an integer"),
    (("engine", "sha256"), (str,), "a hex string"),
    (("inputs",), (list,), "a list"),
    (("outputs",), (list,), "a list"),
)
#: Every key that names a file beside the sidecar.
FILE_KEYS: tuple[tuple[str, str], ...] = (
    ("engine", "file"), ("source", "onnx_file"), ("source", "reference_onnx_file"),
)


def _malformed(path: Path | None, what: str) -> MalformedSidecar:
    return MalformedSidecar(f"sidecar {path or '(in memory)'} {what}; it was edited or damaged. "
                            "Rebuild the engine with trtforge build (or restore the sidecar)")


def check_file_name(name: Any, key: str, path: Path | None = None) -> str:
    """``name`` if it is a plain file name (no folder, no ``..``), so it stays beside the sidecar.

    Example:
        >>> check_file_name("m_fp16.engine", "engine.file")
        'm_fp16.engine'
    """
    if (not isinstance(name, str) or not name or name in (".", "..") or "/" in name or "\\" in name
            or "\0" in name):
        raise NotPermitted(f"sidecar {path or '(in memory)'}: {key} {name!r} is not a plain file name beside the "
                           "sidecar; trtforge reads only files in the sidecar's folder. Rebuild the engine")
    return name


def check_sidecar_dict(data: Mapping[str, Any], path: Path | None = None) -> None:
    """Refuse a sidecar dict that a newer trtforge wrote, that lacks a key, or that names a file elsewhere."""
    version = data.get("schema_version", SCHEMA_VERSION)
    if isinstance(version, bool) or not isinstance(version, int):
        raise _malformed(path, f"has schema_version {version!r}, not an integer")
    if version > SCHEMA_VERSION:
        raise Unsupported(f"sidecar {path or '(in memory)'} has schema_version {version}; this trtforge "
                          f"({__version__}) reads up to {SCHEMA_VERSION}. Upgrade trtforge to read it")
    for keys, types, what in REQUIRED_KEYS:
        value: Any = data
        for key in keys:
            value = value.get(key) if isinstance(value, Mapping) else None
        if isinstance(value, bool) or not isinstance(value, types):
            state = "lacks" if value is None else f"has {type(value).__name__} at"
            raise _malformed(path, f"{state} {'.'.join(keys)} (it must be {what})")
    for kind in ("inputs", "outputs"):
        for i, spec in enumerate(data[kind]):
            if not (isinstance(spec, Mapping) and isinstance(spec.get("name"), str) and isinstance(spec.get("dtype"), str)
                    and isinstance(spec.get("shape"), list) and all(type(d) is int for d in spec["shape"])):
                raise _malformed(path, f"has a bad {kind}[{i}] (it needs name, dtype and an integer shape list)")
    _check_profiles(data.get("profiles"), path)
    if "/" in data["name"] or "\\" in data["name"] or data["name"] in (".", ".."):
        raise NotPermitted(f"sidecar {path}: name {data['name']!r} is not a plain name; rebuild the engine")
    for record, key in FILE_KEYS:
        block = data.get(record)
        if isinstance(block, Mapping) and block.get(key) is not None:
            check_file_name(block[key], f"{record}.{key}", path)


def _check_profiles(profiles: Any, path: Path | None) -> None:
    """Each profile: {input: {"min": [...], "opt": [...], "max": [...]}} with integer dims."""
    if profiles is None:
        return
    if not isinstance(profiles, list):
        raise _malformed(path, f"has {type(profiles).__name__} at profiles (it must be a list)")
    for i, profile in enumerate(profiles):
        ok = isinstance(profile, Mapping) and all(
            isinstance(ranges, Mapping) and all(
                isinstance(ranges.get(k), list) and all(type(d) is int for d in ranges[k]) for k in ("min", "opt", "max"))
            for ranges in profile.values())
        if not ok:
            raise _malformed(path, f"has a bad profiles[{i}] (each input needs integer min, opt and max lists)")



@dataclass(frozen=True, init=False)
class Sidecar:
    """Everything a consumer needs to know about one engine file: its file, the ``BuildRecord`` of the build
    that made it (``build``: inputs, outputs, profiles, precision, builder, source, notes, quantization, shape
    inputs, target plan; read as ``sc.inputs``, ``sc.precision``, ...), and what the request added.

    The build's fields may be given flat, as the JSON holds them, or as one ``build=``; flat ones given with
    ``build=`` replace its fields (``dataclasses.replace(sc, builder=...)`` does so). The sub-records accept
    plain dicts (the JSON objects) and are stored typed. The JSON keeps the build's keys at the top level.

    Example:
        >>> sc = Sidecar(name="m", engine_file="m.engine", engine_size=1, engine_sha256="0" * 64,
        ...              inputs=(), outputs=(), profiles=(), precision={"built": "fp16"},
        ...              builder={"flavour": "tensorrt_rtx"}, source={"kind": "onnx"})
        >>> sc.precision.built, sc.builder.host_code, sc.build.precision is sc.precision
        ('fp16', False, True)
    """

    name: str
    engine_file: str
    engine_size: int
    engine_sha256: str
    #: What the build made; its fields are the sidecar's keys of the same names.
    build: BuildRecord
    preprocessing: PreprocessConfig | None = None
    #: The cut (``--outputs``) and the post-processing appended (``--nms``); absent for builds without either.
    graph_edits: GraphEditsRecord | None = None
    #: The deployment ``trtforge tune`` chose and the device it measured on (absent unless tuned).
    tuned: TunedRecord | None = None
    trtforge_version: str = __version__
    schema_version: int = SCHEMA_VERSION
    extra: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None

    def __init__(self, name: str, engine_file: str, engine_size: int, engine_sha256: str,
                 build: BuildRecord | None = None, *, preprocessing: Any = None, graph_edits: Any = None,
                 tuned: Any = None, trtforge_version: str = __version__, schema_version: int = SCHEMA_VERSION,
                 extra: dict[str, Any] | None = None, path: Path | None = None, **build_fields: Any) -> None:
        if build is None:
            build = BuildRecord(**build_fields)  # a missing or unknown field: TypeError naming it
        elif build_fields:
            build = replace(build, **build_fields)
        values = {"name": name, "engine_file": engine_file, "engine_size": engine_size,
                  "engine_sha256": engine_sha256, "build": build,
                  "preprocessing": None if preprocessing is None else PreprocessConfig.of(preprocessing),
                  "graph_edits": None if graph_edits is None else GraphEditsRecord.from_dict(graph_edits),
                  "tuned": None if tuned is None else TunedRecord.from_dict(tuned),
                  "trtforge_version": trtforge_version, "schema_version": schema_version,
                  "extra": {} if extra is None else extra, "path": path}
        for key, value in values.items():
            object.__setattr__(self, key, value)

    # -- the build's record, read as the sidecar's keys ----------------------------------------
    @property
    def inputs(self) -> tuple[TensorSpec, ...]:
        return self.build.inputs

    @property
    def outputs(self) -> tuple[TensorSpec, ...]:
        return self.build.outputs

    @property
    def profiles(self) -> tuple[ProfileRecord, ...]:
        return self.build.profiles

    @property
    def precision(self) -> PrecisionRecord:
        return self.build.precision

    @property
    def builder(self) -> BuilderRecord:
        return self.build.builder

    @property
    def source(self) -> SourceRecord:
        return self.build.source

    @property
    def notes(self) -> tuple[str, ...]:
        return self.build.notes

    @property
    def quantization(self) -> QuantizationRecord | None:
        return self.build.quantization

    @property
    def shape_inputs(self) -> tuple[ShapeInputRecord, ...]:
        """Inputs read as shape tensors and their built-in values (absent in sidecars without any)."""
        return self.build.shape_inputs

    @property
    def target_plan(self) -> TargetPlanRecord | None:
        """What each quantized layer runs as on each target (absent for builds without quantized layers)."""
        return self.build.target_plan

    @property
    def engine(self) -> EngineRecord:
        """The engine file's record: ``file``, ``size``, ``sha256``."""
        return EngineRecord(file=self.engine_file, size=self.engine_size, sha256=self.engine_sha256)

    # -- derived ---------------------------------------------------------------------------
    @property
    def folder(self) -> Path:
        """The sidecar's folder: every file it names lies here."""
        return self.path.parent if self.path is not None else Path(".")

    def file(self, name: str, key: str) -> Path:
        """The file ``name`` (the value of sidecar key ``key``) beside the sidecar; a path elsewhere is refused."""
        return self.folder / check_file_name(name, key, self.path)

    @property
    def engine_path(self) -> Path:
        return self.file(self.engine_file, "engine.file")

    def verify_engine(self) -> Path:
        """Check the engine's size and sha256 against this sidecar; return its path."""
        return self.verify_file("engine.file", self.engine_file, self.engine_sha256, self.engine_size)

    def verify_source_file(self, which: str) -> Path:
        """The ``"processed"`` or ``"reference"`` ONNX file beside the sidecar, its recorded sha256 checked.

        Example:
            >>> sc.verify_source_file("reference")      # before ONNX Runtime loads it
            PosixPath('out/m_reference_fp32.onnx')
        """
        src = self.source
        name, digest, key = ((src.reference_onnx_file, src.reference_onnx_sha256, "source.reference_onnx_file")
                             if which == "reference" else (src.onnx_file, src.onnx_sha256, "source.onnx_file"))
        if not name:
            raise MissingFile(f"sidecar {self.path} names no {which} ONNX file ({key}); keep the .onnx files "
                              "trtforge wrote beside the engine, or rebuild it")
        return self.verify_file(key, name, digest)

    def verify_file(self, key: str, name: str, sha256: str | None, size: int | None = None) -> Path:
        """The file ``name`` beside the sidecar, refused unless its size and sha256 match the record."""
        path = self.file(name, key)
        if not path.is_file():
            raise MissingFile(f"{path} named by sidecar {self.path} ({key}) does not exist; keep the files "
                              "trtforge wrote together, or rebuild")
        if sha256 is None:
            raise EngineHashMismatch(f"sidecar {self.path} records no sha256 for {key}; trtforge loads only files "
                                     "whose hash it can check. Rebuild with trtforge build")
        actual = path.stat().st_size
        digest = sha256_file(path)
        if (size is not None and actual != size) or digest != sha256:
            expected = f" ({size} bytes)" if size is not None else ""
            raise EngineHashMismatch(
                f"{path} does not match its sidecar {self.path}: sha256 {digest[:12]}… ({actual} bytes), expected "
                f"{sha256[:12]}…{expected}. The file was replaced or corrupted; rebuild it with trtforge build."
            )
        return path

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
        if self.shape_inputs:
            data["shape_inputs"] = [r.to_dict() for r in self.shape_inputs]
        if self.target_plan is not None:
            data["target_plan"] = self.target_plan.to_dict()
        if self.graph_edits is not None:
            data["graph_edits"] = self.graph_edits.to_dict()
        if self.tuned is not None:
            data["tuned"] = self.tuned.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any], path: Path | None = None) -> Sidecar:
        """A sidecar from its JSON object; a malformed, newer or unconfined one is refused (``check_sidecar_dict``)."""
        check_sidecar_dict(data, path)
        known = sidecar_keys()
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
            shape_inputs=_shape_inputs(data.get("shape_inputs"), path),
            target_plan=data.get("target_plan"),
            graph_edits=data.get("graph_edits"),
            tuned=data.get("tuned"),
            trtforge_version=data.get("trtforge_version", "unknown"),
            schema_version=int(data.get("schema_version", SCHEMA_VERSION)),
            extra={k: v for k, v in data.items() if k not in known},
            path=path,
        )

    def unknown_keys(self) -> list[str]:
        """Every key this version does not know (``extra``, here and in each sub-record), dotted.

        trtforge itself never writes one; a key that lands here was written by another version or by hand.

        Example:
            >>> Sidecar.from_dict({**sc.to_dict(), "future": 1}).unknown_keys()
            ['future']
        """
        found = list(self.extra)
        records = {"precision": self.precision, "builder": self.builder, "source": self.source,
                   "target_plan": self.target_plan,
                   "quantization": self.quantization, "graph_edits": self.graph_edits,
                   "graph_edits.nms": self.graph_edits.nms if self.graph_edits is not None else None,
                   "tuned": self.tuned,
                   **{f"shape_inputs[{i}]": r for i, r in enumerate(self.shape_inputs)}}
        for name, record in records.items():
            found += [f"{name}.{key}" for key in (record.extra if record is not None else ())]
        return found

    def with_engine(self, engine: Path) -> Sidecar:
        """A copy whose engine fields describe the file at ``engine`` (name, size, sha256)."""
        return replace(
            self, engine_file=engine.name, engine_size=engine.stat().st_size,
            engine_sha256=sha256_file(engine),
        )


def sidecar_keys() -> frozenset[str]:
    """The top-level JSON keys a sidecar holds, derived from ``Sidecar``'s and its ``BuildRecord``'s fields
    (``engine_*`` → ``engine``; the build's fields are keys of their own)."""
    names = {f.name for f in fields(Sidecar)} - {"extra", "path", "engine_file", "engine_size", "engine_sha256",
                                                 "build"}
    return frozenset(names | {f.name for f in fields(BuildRecord)} | {"engine", "generator"})


def _shape_inputs(value: Any, path: Path | None) -> tuple[ShapeInputRecord, ...]:
    """The ``shape_inputs`` list: each {"name": str, "values": [int, ...]}; anything else is malformed."""
    if value is None:
        return ()
    ok = isinstance(value, list) and all(
        isinstance(r, Mapping) and isinstance(r.get("name"), str) and isinstance(r.get("values"), list)
        and all(type(v) is int for v in r["values"]) for r in value)
    if not ok:
        raise _malformed(path, "has a bad shape_inputs (each needs a name and an integer values list)")
    return tuple(ShapeInputRecord.from_dict(r) for r in value)


def is_trtforge_sidecar(path: Path) -> bool:
    """True when ``path`` is a JSON file that trtforge wrote."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(data, dict) and data.get("generator") == GENERATOR


def check_writable(path: Path) -> None:
    """Refuse to overwrite a file at ``path`` that trtforge did not write."""
    if path.exists() and not is_trtforge_sidecar(path):
        raise FileConflict(
            f"{path} exists and was not written by trtforge; refusing to overwrite it. "
            "Move it away, or choose another name= or output directory."
        )


def sidecar_bytes(sidecar: Sidecar) -> bytes:
    """The sidecar as the UTF-8 JSON text trtforge writes (indented, one trailing newline)."""
    return (json.dumps(sidecar.to_dict(), indent=2, sort_keys=False) + "\n").encode()


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
    atomic_write_bytes(path, sidecar_bytes(sidecar), mode=mode)
    return path


def read_sidecar(path: Path) -> Sidecar:
    """Read a sidecar; ``path`` may be the ``.json`` or the ``.engine`` beside it."""
    path = Path(path)
    if path.is_dir() or not path.name:
        raise InvalidArgument(f"{path} is a folder; pass an engine's .json sidecar or its .engine, "
                              "e.g. trtforge_out/model_fp16.json")
    if path.suffix != ".json":
        path = path.with_suffix(".json")
    if not path.is_file():
        raise MissingFile(f"no sidecar at {path}; every trtforge engine has a .json beside it")
    try:
        data = json.loads(path.read_text())
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError included; RecursionError: nested too deep
        reason = "nested too deeply to read" if isinstance(exc, RecursionError) else str(exc)
        raise InvalidArgument(f"{path} is not valid JSON ({reason}); rebuild the engine or restore its sidecar") from exc
    if not isinstance(data, dict) or data.get("generator") != GENERATOR:
        raise InvalidArgument(f"{path} is not a trtforge sidecar (no \"generator\": \"trtforge\")")
    return Sidecar.from_dict(data, path=path)
