"""``trtforge.compile``: capture → passes → (quantize) → build → artifact, validated up front.

Example:
    >>> import torch, trtforge
    >>> from trtforge.zoo import efficientnet_lite0
    >>> model = efficientnet_lite0()
    >>> art = trtforge.compile(model, (torch.zeros(1, 3, 224, 224),), precision="fp16", batch=(1, 8, 32))
    >>> art.engine_path
    PosixPath('trtforge_out/efficientnet_lite0_fp16.engine')
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
import logging
import re
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import onnx
import onnx_ir as ir
from rich.console import Console
from rich.markup import escape

from trtforge._version import __version__
from trtforge.artifact import Artifact
from trtforge.builder.build import BuildResult, build_engine
from trtforge.builder.portability import file_suffix
from trtforge.builder.timing_cache import check_timing_cache_path
from trtforge.cache.engine_cache import CacheEntry, EngineCache, engine_key
from trtforge.capture.export import export_onnx, normalize_example_inputs
from trtforge.capture.onnx_file import load_onnx
from trtforge.core.atomic import atomic_write_bytes
from trtforge.core.config import CompileConfig, ConfigError, QuantConfig
from trtforge.core.errors import FileConflict, MissingFile, NotAFolder, NotPermitted, WrongType
from trtforge.core.hashing import sha256_file
from trtforge.core.sidecar import Sidecar, check_writable, is_trtforge_sidecar, write_sidecar
from trtforge.core.specs import TensorSpec
from trtforge.passes.graph import dtype_summary, proto_bytes
from trtforge.passes.process import Processed, process, reference_graph

log = logging.getLogger(__name__)


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


def default_name(model_or_onnx: Any) -> str:
    if isinstance(model_or_onnx, (str, Path)):
        stem = Path(model_or_onnx).stem
    else:
        stem = getattr(model_or_onnx, "trtforge_name", None) or type(model_or_onnx).__name__
        stem = re.sub(r"(?<!^)(?=[A-Z])", "_", stem).lower()
    return re.sub(r"[^A-Za-z0-9._-]", "_", stem) or "model"


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


def _source_info(model_or_onnx: Any) -> dict:
    """The sidecar's ``source`` facts that need no capture."""
    if isinstance(model_or_onnx, (str, Path)):
        return {"kind": "onnx", "original": str(model_or_onnx)}
    source = {"kind": "torch", "module": type(model_or_onnx).__qualname__}
    factory = getattr(model_or_onnx, "trtforge_factory", None)
    if factory:
        source["factory"] = factory
    return source


def _capture(model_or_onnx: Any, example_inputs: Any, tmp: Path, input_names, output_names) -> onnx.ModelProto:
    """The model as ONNX: a file as it is, a module exported with a dynamic batch (profiles decide)."""
    if isinstance(model_or_onnx, (str, Path)):
        return load_onnx(Path(model_or_onnx))
    input_names = input_names or getattr(model_or_onnx, "trtforge_input_names", None)
    output_names = output_names or getattr(model_or_onnx, "trtforge_output_names", None)
    path = export_onnx(model_or_onnx, example_inputs, tmp / "captured.onnx", input_names=input_names,
                       output_names=output_names, dynamic_batch=True)
    return load_onnx(path)


def _static_io(specs: tuple[TensorSpec, ...], config: CompileConfig) -> tuple[TensorSpec, ...]:
    """With one static batch profile, write that batch into dim 0 instead of -1."""
    if len(config.batch) != 1 or not config.batch[0].static:
        return specs
    batch = config.batch[0].opt
    return tuple(
        TensorSpec(s.name, s.dtype, (batch, *s.shape[1:])) if s.shape and s.shape[0] < 0 else s for s in specs
    )


def compile(  # noqa: A001 - the public verb users expect
    model_or_onnx: Any,
    example_inputs: Any = None,
    config: CompileConfig | None = None,
    *,
    calibration_data: Any = None,
    console: Console | None = None,
    **overrides: Any,
) -> Artifact:
    """Turn a PyTorch module (with example inputs) or an ``.onnx`` file into an engine + sidecar.

    ``overrides`` are ``CompileConfig`` fields, applied over ``config`` (default: ``CompileConfig()``).
    A second call with the same arguments is a cache hit (``cache_dir``, default
    ``~/.cache/trtforge/engines`` or ``$TRTFORGE_CACHE_DIR``; ``cache=False`` turns it off).
    Portability options add a file-name suffix (``_sm89``, ``_ampere_plus``, ...); see docs/portability.md.

    Example:
        >>> art = compile("model.onnx", precision="fp16", batch=[(1, 1, 1), (1, 8, 32)], targets=["sm89"])
        >>> art = compile(model, (x,), CompileConfig(precision="int8"), calibration_data=Path("calib/"))
    """
    config, paths = validate(model_or_onnx, example_inputs, config, calibration_data, overrides)
    console = console or Console(stderr=True)
    engine_cache = EngineCache(config.cache_dir) if config.cache else None
    with contextlib.ExitStack() as stack:
        request = _request_key(model_or_onnx, example_inputs, config, engine_cache)
        built = _lookup_request(stack, engine_cache, request)
        if built is None:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="trtforge-")))
            if config.path == "direct":
                built = _convert_and_build(model_or_onnx, example_inputs, config, engine_cache=engine_cache,
                                           console=console)
            else:
                built = _capture_and_build(model_or_onnx, example_inputs, config, tmp=tmp,
                                           calibration_data=calibration_data, engine_cache=engine_cache,
                                           console=console)
            if request is not None:
                engine_cache.remember_request(request, built.key)
        if built.hit:
            log.info("cache hit: %s (%s…)", config.name, built.key[:12])
            if config.progress:
                console.print(f"[green]cache hit[/] {escape(config.name)} ({built.key[:12]}…)")
        return write_artifact(model_or_onnx, config, paths, built, cached=engine_cache is not None)


def validate(model_or_onnx: Any, example_inputs: Any, config: CompileConfig | None, calibration_data: Any,
             overrides: Mapping[str, Any]) -> tuple[CompileConfig, OutputPaths]:
    """Every cheap check, before capture, passes or build start; the config with its name resolved."""
    config = (config or CompileConfig()).with_overrides(**overrides)
    config.check_toolchain()
    if config.timing_cache is not None:
        config = replace(config, timing_cache=check_timing_cache_path(config.timing_cache))
    if config.precision == "int8" and calibration_data is None:
        raise ConfigError(
            "precision='int8' needs calibration_data= (an image folder, a .npy file, an array, "
            "an iterable of input dicts, or a callable); see docs/quantization.md"
        )
    _check_direct(model_or_onnx, config)
    name = default_name(model_or_onnx) if config.name is None else config.name
    preprocessing = config.preprocessing
    if preprocessing is None:
        preprocessing = getattr(model_or_onnx, "preprocessing", None)
    config = replace(config, name=name, preprocessing=preprocessing)
    _check_model(model_or_onnx, example_inputs)
    paths = OutputPaths(prepare_output_dir(config.output_dir), name, config.precision, file_suffix(config))
    check_destinations(paths, config.possible_precisions)
    reference = paths.reference_onnx()
    if reference.exists() and not any(is_trtforge_sidecar(p) for p in paths.directory.glob(f"{name}_*.json")):
        raise FileConflict(
            f"{reference} exists and no trtforge sidecar of {name!r} is beside it; refusing to overwrite a "
            "file trtforge did not write. Move it away or choose another name=."
        )
    return config, paths


def _check_direct(model_or_onnx: Any, config: CompileConfig) -> None:
    """What the direct path cannot take: an ONNX file, INT8 (not on the direct path yet)."""
    if config.path != "direct":
        return
    if isinstance(model_or_onnx, (str, Path)):
        raise ConfigError(f"path='direct' converts a PyTorch module, and {model_or_onnx} is a file; pass the "
                          "nn.Module with example inputs, or build the .onnx with path='onnx'")
    if config.precision == "int8":
        raise ConfigError("precision='int8' is not on the direct path yet; use path='onnx' for INT8, or "
                          "fp32/fp16/bf16 on the direct path")


def _check_model(model_or_onnx: Any, example_inputs: Any) -> None:
    """A module whose example inputs fit its ``forward``, or an existing file."""
    if not isinstance(model_or_onnx, (str, Path)):
        import torch

        if not isinstance(model_or_onnx, torch.nn.Module):
            raise WrongType(
                f"compile() takes a torch.nn.Module or a path to an .onnx file, not {type(model_or_onnx).__name__}"
            )
        normalize_example_inputs(model_or_onnx, example_inputs)
    elif not Path(model_or_onnx).exists():
        raise MissingFile(f"model file {model_or_onnx} does not exist; pass an .onnx file or an nn.Module")


def _request_key(model_or_onnx: Any, example_inputs: Any, config: CompileConfig,
                 engine_cache: EngineCache | None) -> str | None:
    """A cheap key over what was asked (a hit skips export, passes and build); none for int8."""
    if engine_cache is None or config.precision == "int8":
        return None
    from trtforge.cache.request_key import request_key

    return request_key(model_or_onnx, example_inputs, config, converter_hash=_converter_hash(config))


def _converter_hash(config: CompileConfig) -> str | None:
    """The converters' source hash on the direct path (part of both cache keys), else None."""
    if config.path != "direct":
        return None
    from trtforge.convert.converters import source_hash

    return source_hash()


def _lookup_request(stack: contextlib.ExitStack, engine_cache: EngineCache | None, request: str | None) -> _Built | None:
    """The cached build for ``request``, holding its lock on ``stack`` until the artifact is written."""
    if request is None or engine_cache is None:
        return None
    stack.enter_context(engine_cache.lock(f"request-{request}"))
    key = engine_cache.lookup_request(request)
    entry = engine_cache.get(key) if key else None
    return _Built.from_entry(entry) if entry is not None else None


def write_artifact(model_or_onnx: Any, config: CompileConfig, paths: OutputPaths, built: _Built, *,
                   cached: bool) -> Artifact:
    """Engine first, then graphs, then the sidecar (atomic, each)."""
    record = built.record
    built_precision = record["precision"]["built"]
    engine_path = paths.engine(built_precision)
    atomic_write_bytes(engine_path, built.plan)
    onnx_path = reference_path = None
    source = {**_source_info(model_or_onnx), **record.get("source", {})}
    if built.processed_onnx is not None:  # the ONNX path; the direct path makes no ONNX
        onnx_path, reference_path = paths.onnx(built_precision), paths.reference_onnx()
        atomic_write_bytes(onnx_path, built.processed_onnx)
        atomic_write_bytes(reference_path, built.reference_onnx)
        source.update({"onnx_file": onnx_path.name, "onnx_sha256": record["onnx_sha256"],
                       "reference_onnx_file": reference_path.name,
                       "reference_onnx_sha256": record["reference_onnx_sha256"]})
    cache_info = {"key": built.key, "hit": built.hit} if cached else {"enabled": False}
    sidecar = Sidecar(
        name=config.name,
        engine_file=engine_path.name,
        engine_size=len(built.plan),
        engine_sha256=sha256_file(engine_path),
        inputs=tuple(TensorSpec.from_dict(d) for d in record["inputs"]),
        outputs=tuple(TensorSpec.from_dict(d) for d in record["outputs"]),
        profiles=tuple(record["profiles"]),
        precision=record["precision"],
        builder={**record["builder"], "cache": cache_info},
        source=source,
        preprocessing=config.preprocessing,
        notes=(*config.notes, *record["notes"]),
        quantization=record["quantization"],
    )
    sidecar_path = write_sidecar(paths.sidecar(built_precision), sidecar)
    return Artifact(engine_path=engine_path, sidecar_path=sidecar_path, onnx_path=onnx_path,
                    reference_onnx_path=reference_path, sidecar=Sidecar.from_dict(sidecar.to_dict(), sidecar_path))


@dataclass(frozen=True)
class _Built:
    """One build's products, fresh or read back from the engine cache."""

    key: str
    plan: bytes
    #: The processed and reference graphs; None on the direct path (no ONNX is made).
    processed_onnx: bytes | None
    reference_onnx: bytes | None
    #: JSON-able facts of the build: inputs, outputs, profiles, precision, builder, hashes, notes.
    record: dict
    hit: bool = False

    def files(self) -> dict[str, bytes]:
        graphs = {"processed.onnx": self.processed_onnx, "reference.onnx": self.reference_onnx}
        return {"engine": self.plan, "record.json": json.dumps(self.record).encode(),
                **{name: data for name, data in graphs.items() if data is not None}}

    @classmethod
    def from_entry(cls, entry: CacheEntry) -> _Built:
        files = entry.files
        return cls(key=entry.key, plan=files["engine"], processed_onnx=files.get("processed.onnx"),
                   reference_onnx=files.get("reference.onnx"), record=json.loads(files["record.json"]), hit=True)


def _process(reference: ir.Model, config: CompileConfig, calibration_data: Any) -> tuple[Processed, dict | None]:
    """The processed graph for ``config.precision`` (INT8: quantize first, for the plan) and the INT8 report."""
    if config.precision != "int8":
        return process(reference, config.precision), None
    from trtforge.quantize.quantizer import quantize_model

    result = quantize_model(reference, calibration_data, config.quant if config.quant is not None else QuantConfig(),
                            preprocessing=config.preprocessing, progress=config.progress)
    return process(result.fp32, "int8", result.plan), result.report


def _capture_and_build(model_or_onnx: Any, example_inputs: Any, config: CompileConfig, *, tmp: Path,
                       calibration_data: Any, engine_cache: EngineCache | None, console: Console) -> _Built:
    """Capture → passes → (quantize) → engine-cache lookup → build → store."""
    name, progress = config.name, config.progress
    proto = _capture(model_or_onnx, example_inputs, tmp, config.input_names, config.output_names)
    # 2. Passes: cleanup (the FP32 reference), then precision; each graph is serialised once.
    reference = reference_graph(proto)
    reference_bytes = proto_bytes(reference)
    processed, quant_report = _process(reference, config, calibration_data)
    float_plan, built_precision = processed.float_plan, processed.built_precision
    processed_bytes = reference_bytes if processed.model is reference else proto_bytes(processed.model)
    network_name = f"{name}_{built_precision}"
    key = engine_key(processed_bytes, config, network_name=network_name)
    with engine_cache.lock(key) if engine_cache is not None else contextlib.nullcontext():
        entry = engine_cache.get(key) if engine_cache is not None else None
        if entry is not None:
            return _Built.from_entry(entry)
        staged = tmp / "processed.onnx"
        staged.write_bytes(processed_bytes)
        # 3. Build.
        result: BuildResult = build_engine(staged, config, name=network_name, progress=progress, console=console)
        notes = []
        if float_plan is not None and float_plan.fp32_nodes:
            notes.append(f"{len(float_plan.fp32_nodes)} node(s) kept in FP32 by the float pass")
        precision = {"requested": config.precision, "built": built_precision,
                     "node_dtypes": dtype_summary(processed.model),
                     "fp32_nodes": dict(float_plan.fp32_nodes) if float_plan else {}}
        record = _build_record(result, config, precision, notes, quantization=quant_report,
                               onnx_sha256=hashlib.sha256(processed_bytes).hexdigest(),
                               reference_onnx_sha256=hashlib.sha256(reference_bytes).hexdigest())
        built = _Built(key=key, plan=result.plan, processed_onnx=processed_bytes, reference_onnx=reference_bytes,
                       record=record)
        _store(engine_cache, built, config)
        return built


def _build_record(result: BuildResult, config: CompileConfig, precision: dict, notes: list[str],
                  **facts: Any) -> dict:
    """The JSON-able record of one build (the sidecar's inputs, outputs, profiles, precision, builder),
    plus path-specific ``facts`` (graph hashes, quantization, source)."""
    record = {
        "inputs": [s.as_dict() for s in _static_io(result.inputs, config)],
        "outputs": [s.as_dict() for s in _static_io(result.outputs, config)],
        "profiles": list(result.profiles),
        "precision": precision,
        "builder": {**result.builder, "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                    "config": config.key_fields(), "trtforge_version": __version__},
        "notes": notes,
        "quantization": None,
        **facts,
    }
    return json.loads(json.dumps(record))


def _store(engine_cache: EngineCache | None, built: _Built, config: CompileConfig) -> None:
    """Put a fresh build into the engine cache (when there is one)."""
    if engine_cache is not None:
        engine_cache.put(built.key, built.files(), {
            "model": config.name, "precision": built.record["precision"]["built"], "targets": list(config.targets),
            "options": file_suffix(config).lstrip("_"), "engine_size": len(built.plan),
        })


def _convert_and_build(model: Any, example_inputs: Any, config: CompileConfig, *,
                       engine_cache: EngineCache | None, console: Console) -> _Built:
    """The direct path: PyTorch → TensorRT network (trtforge.convert) → engine-cache lookup → build → store.

    The key hashes the recorded network and the converters' source; no ONNX is made.
    """
    from trtforge.builder.build import build_network
    from trtforge.convert.api import lower_for_profiles

    args, kwargs = normalize_example_inputs(model, example_inputs)
    if kwargs:
        raise WrongType("path='direct' takes positional example inputs; pass a tuple of tensors in forward's order")
    input_names = config.input_names or getattr(model, "trtforge_input_names", None)
    output_names = config.output_names or getattr(model, "trtforge_output_names", None)
    lowered = lower_for_profiles(model, args, config.batch, precision=config.precision,
                                 input_names=None if input_names is None else list(input_names),
                                 output_names=None if output_names is None else list(output_names))
    network_name = f"{config.name}_{config.precision}"
    converter_hash = _converter_hash(config)
    key = engine_key(lowered.net.record.canonical(), config, network_name=network_name, converter_hash=converter_hash)
    with engine_cache.lock(key) if engine_cache is not None else contextlib.nullcontext():
        entry = engine_cache.get(key) if engine_cache is not None else None
        if entry is not None:
            return _Built.from_entry(entry)
        net = lowered.net
        result = build_network(net.builder, net.net, net.logger, config, name=network_name,
                               progress=config.progress, console=console)
        precision = {"requested": config.precision, "built": config.precision, "node_dtypes": {},
                     "fp32_nodes": dict(lowered.fp32_nodes)}
        notes = ["direct path (PyTorch → TensorRT, no ONNX): no .onnx beside the engine, so no onnxruntime route"]
        if lowered.fp32_nodes:
            notes.append(f"{len(lowered.fp32_nodes)} node(s) kept in FP32 by the direct path's float rules")
        record = _build_record(result, config, precision, notes, source={"path": "direct"})
        record["builder"]["converter_hash"] = converter_hash
        built = _Built(key=key, plan=result.plan, processed_onnx=None, reference_onnx=None, record=record)
        _store(engine_cache, built, config)
        return built


def build_matrix(
    model_or_onnx: Any,
    example_inputs: Any = None,
    config: CompileConfig | None = None,
    *,
    targets: Sequence[str],
    multi_target: bool = True,
    calibration_data: Any = None,
    console: Console | None = None,
    **overrides: Any,
) -> list[Artifact]:
    """One engine per compute capability (TensorRT-RTX), and one multi-target engine when asked.

    Every engine gets its target suffix (``_sm86``; ``_sm80_sm86_sm89`` for the multi-target one)
    and its size in its sidecar; a table compares them. ``overrides`` are ``CompileConfig`` fields.

    Example:
        >>> arts = build_matrix(model, (x,), targets=["sm80", "sm86", "sm89", "sm120"], precision="fp16")
        >>> [a.engine_path.name for a in arts][-1]
        'efficientnet_lite0_fp16_sm80_sm86_sm89_sm120.engine'
    """
    from rich.table import Table

    targets = [str(t).lower() for t in targets]
    if not targets:
        raise ConfigError("build_matrix needs targets=[...], e.g. ['sm80', 'sm86', 'sm89', 'sm120']")
    if "targets" in overrides:
        raise WrongType("build_matrix takes targets= once, as its own argument")
    config = (config or CompileConfig()).with_overrides(**overrides)
    for target in targets:  # refuse an unknown target before the first (expensive) build
        replace(config, targets=(target,)).check_toolchain()
    console = console or Console(stderr=True)
    plans: list[list[str]] = [[t] for t in targets] + ([targets] if multi_target and len(targets) > 1 else [])
    artifacts = [compile(model_or_onnx, example_inputs, config, targets=plan, calibration_data=calibration_data,
                         console=console) for plan in plans]
    table = Table(title="build matrix")
    for column in ("targets", "engine", "bytes", "cache"):
        table.add_column(column)
    for plan, art in zip(plans, artifacts, strict=True):
        hit = (art.sidecar.builder.cache or {}).get("hit")
        table.add_row(",".join(plan), art.engine_path.name, f"{art.sidecar.engine_size:,}", "hit" if hit else "built")
    console.print(table)
    return artifacts
