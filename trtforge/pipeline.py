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
import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx
import onnx_ir as ir
from rich.console import Console

from trtforge._version import __version__
from trtforge.artifact import Artifact
from trtforge.builder.build import BuildResult, build_engine
from trtforge.builder.config import BuildConfig, BuildConfigError
from trtforge.builder.portability import file_suffix
from trtforge.cache.engine_cache import CacheEntry, EngineCache, engine_key
from trtforge.capture.export import export_onnx, normalize_example_inputs
from trtforge.capture.onnx_file import load_onnx
from trtforge.core.atomic import atomic_write_bytes
from trtforge.core.sidecar import Sidecar, check_writable, is_trtforge_sidecar, sha256_file, write_sidecar
from trtforge.core.specs import TensorSpec
from trtforge.passes.graph import dtype_summary, proto_bytes
from trtforge.passes.process import Processed, process, reference_graph

NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
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


def validate_name(name: str) -> str:
    if not name or "/" in name or "\\" in name or os.sep in name:
        raise ValueError(f"name {name!r} must be a plain file-name stem without a path separator; "
                         "put the folder in output_dir=")
    if not NAME_PATTERN.fullmatch(name):
        raise ValueError(f"name {name!r}: use letters, digits, '.', '_' and '-' (starting with a letter or digit)")
    return name


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
        raise NotADirectoryError(f"output_dir {directory} is a file; pass a folder")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".trtforge-write-check-"):
            pass
    except OSError as exc:
        raise PermissionError(
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
                raise FileExistsError(
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


def _static_io(specs: tuple[TensorSpec, ...], config: BuildConfig) -> tuple[TensorSpec, ...]:
    """With one static batch profile, write that batch into dim 0 instead of -1."""
    if len(config.batches) != 1 or not config.batches[0].static:
        return specs
    batch = config.batches[0].opt
    return tuple(
        TensorSpec(s.name, s.dtype, (batch, *s.shape[1:])) if s.shape and s.shape[0] < 0 else s for s in specs
    )


def compile(  # noqa: A001 - the public verb users expect
    model_or_onnx: Any,
    example_inputs: Any = None,
    *,
    precision: str = "fp16",
    batch: Any = 1,
    targets: Sequence[str] | str | None = None,
    output_dir: str | Path = "trtforge_out",
    name: str | None = None,
    preprocessing: Mapping[str, Any] | None = None,
    notes: str | Sequence[str] | None = None,
    shapes: Mapping[str, Sequence[Sequence[int]]] | None = None,
    optimization_level: int = 3,
    workspace_bytes: int | None = None,
    input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
    calibration_data: Any = None,
    quant: Any = None,
    progress: bool = True,
    console: Console | None = None,
    cache: bool = True,
    cache_dir: str | Path | None = None,
    timing_cache: str | Path | None = None,
    hardware_compatibility: str | None = None,
    version_compatible: bool = False,
    refittable: bool = False,
    strip_weights: bool = False,
) -> Artifact:
    """Turn a PyTorch module (with example inputs) or an ``.onnx`` file into an engine + sidecar.

    A second call with the same arguments is a cache hit (``cache_dir``, default
    ``~/.cache/trtforge/engines`` or ``$TRTFORGE_CACHE_DIR``; ``cache=False`` turns it off).
    Portability options add a file-name suffix (``_sm89``, ``_ampere_plus``, ...); see docs/portability.md.

    Example:
        >>> art = compile("model.onnx", precision="fp16", batch=[(1, 1, 1), (1, 8, 32)], targets=["sm89"])
    """
    console = console or Console(stderr=True)
    # 1. Everything cheap is validated before capture, passes or build start.
    config = BuildConfig.create(precision=precision, batch=batch, shapes=shapes, targets=targets,
                                optimization_level=optimization_level, workspace_bytes=workspace_bytes,
                                hardware_compatibility=hardware_compatibility,
                                version_compatible=version_compatible, refittable=refittable,
                                strip_weights=strip_weights, timing_cache=timing_cache)
    if config.precision == "int8" and calibration_data is None:
        raise BuildConfigError(
            "precision='int8' needs calibration_data= (an image folder, a .npy file, an array, "
            "an iterable of input dicts, or a callable); see docs/quantization.md"
        )
    name = validate_name(default_name(model_or_onnx) if name is None else name)
    if preprocessing is None:
        preprocessing = getattr(model_or_onnx, "preprocessing", None)
    if not isinstance(model_or_onnx, (str, Path)):
        import torch

        if not isinstance(model_or_onnx, torch.nn.Module):
            raise TypeError(
                f"compile() takes a torch.nn.Module or a path to an .onnx file, not {type(model_or_onnx).__name__}"
            )
        normalize_example_inputs(model_or_onnx, example_inputs)
    elif not Path(model_or_onnx).exists():
        raise FileNotFoundError(f"model file {model_or_onnx} does not exist; pass an .onnx file or an nn.Module")
    paths = OutputPaths(prepare_output_dir(Path(output_dir)), name, config.precision, file_suffix(config))
    float_precision = "fp32" if config.float_dtype is None else {"float16": "fp16", "bfloat16": "bf16"}[config.float_dtype]
    check_destinations(paths, sorted({config.precision, float_precision}))
    reference = paths.reference_onnx()
    if reference.exists() and not any(is_trtforge_sidecar(p) for p in paths.directory.glob(f"{name}_*.json")):
        raise FileExistsError(
            f"{reference} exists and no trtforge sidecar of {name!r} is beside it; refusing to overwrite a "
            "file trtforge did not write. Move it away or choose another name=."
        )

    engine_cache = EngineCache(cache_dir) if cache else None
    with contextlib.ExitStack() as stack:
        built: _Built | None = None
        request = None
        if engine_cache is not None and config.precision != "int8":
            # A cheap key over what was asked: a hit skips export, passes and build.
            from trtforge.cache.request_key import request_key

            request = request_key(model_or_onnx, example_inputs, config, name=name, input_names=input_names,
                                  output_names=output_names)
            stack.enter_context(engine_cache.lock(f"request-{request}"))
            key = engine_cache.lookup_request(request)
            entry = engine_cache.get(key) if key else None
            if entry is not None:
                built = _Built.from_entry(entry)
        if built is None:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="trtforge-")))
            built = _capture_and_build(model_or_onnx, example_inputs, config, name=name, tmp=tmp,
                                       input_names=input_names, output_names=output_names,
                                       calibration_data=calibration_data, quant=quant,
                                       preprocessing=preprocessing, engine_cache=engine_cache,
                                       progress=progress, console=console)
            if request is not None:
                engine_cache.remember_request(request, built.key)
        if built.hit:
            log.info("cache hit: %s (%s…)", name, built.key[:12])
            if progress:
                console.print(f"[green]cache hit[/] {name} ({built.key[:12]}…)")
        # 4. Artifact: engine first, then graphs, then the sidecar (atomic, each).
        record = built.record
        built_precision = record["precision"]["built"]
        engine_path = paths.engine(built_precision)
        atomic_write_bytes(engine_path, built.plan, mode=0o644)
        onnx_path = paths.onnx(built_precision)
        atomic_write_bytes(onnx_path, built.processed_onnx)
        atomic_write_bytes(paths.reference_onnx(), built.reference_onnx)
        notes_list = [notes] if isinstance(notes, str) else list(notes or ())
        notes_list += record["notes"]
        source = {
            **_source_info(model_or_onnx),
            "onnx_file": onnx_path.name,
            "onnx_sha256": record["onnx_sha256"],
            "reference_onnx_file": paths.reference_onnx().name,
            "reference_onnx_sha256": record["reference_onnx_sha256"],
        }
        cache_info = {"key": built.key, "hit": built.hit} if engine_cache is not None else {"enabled": False}
        sidecar = Sidecar(
            name=name,
            engine_file=engine_path.name,
            engine_size=len(built.plan),
            engine_sha256=sha256_file(engine_path),
            inputs=tuple(TensorSpec.from_dict(d) for d in record["inputs"]),
            outputs=tuple(TensorSpec.from_dict(d) for d in record["outputs"]),
            profiles=tuple(record["profiles"]),
            precision=record["precision"],
            builder={**record["builder"], "cache": cache_info},
            source=source,
            preprocessing=dict(preprocessing) if preprocessing else None,
            notes=tuple(notes_list),
            quantization=record["quantization"],
        )
        sidecar_path = write_sidecar(paths.sidecar(built_precision), sidecar)
    return Artifact(engine_path=engine_path, sidecar_path=sidecar_path, onnx_path=onnx_path,
                    reference_onnx_path=paths.reference_onnx(), sidecar=Sidecar.from_dict(sidecar.to_dict(), sidecar_path))


@dataclass(frozen=True)
class _Built:
    """One build's products, fresh or read back from the engine cache."""

    key: str
    plan: bytes
    processed_onnx: bytes
    reference_onnx: bytes
    #: JSON-able facts of the build: inputs, outputs, profiles, precision, builder, hashes, notes.
    record: dict
    hit: bool = False

    def files(self) -> dict[str, bytes]:
        return {"engine": self.plan, "processed.onnx": self.processed_onnx,
                "reference.onnx": self.reference_onnx, "record.json": json.dumps(self.record).encode()}

    @classmethod
    def from_entry(cls, entry: CacheEntry) -> _Built:
        files = entry.files
        return cls(key=entry.key, plan=files["engine"], processed_onnx=files["processed.onnx"],
                   reference_onnx=files["reference.onnx"], record=json.loads(files["record.json"]), hit=True)


def _process(reference: ir.Model, config: BuildConfig, calibration_data, quant, preprocessing,
             progress: bool) -> tuple[Processed, dict | None]:
    """The processed graph for ``config.precision`` (INT8: quantize first, for the plan) and the INT8 report."""
    if config.precision != "int8":
        return process(reference, config.precision), None
    from trtforge.quantize.api import QuantConfig
    from trtforge.quantize.quantizer import quantize_model

    result = quantize_model(reference, calibration_data, quant if quant is not None else QuantConfig(),
                            preprocessing=dict(preprocessing) if preprocessing else None, progress=progress)
    return process(result.fp32, "int8", result.plan), result.report


def _capture_and_build(model_or_onnx: Any, example_inputs: Any, config: BuildConfig, *, name: str, tmp: Path,
                       input_names, output_names, calibration_data, quant, preprocessing,
                       engine_cache: EngineCache | None, progress: bool, console: Console) -> _Built:
    """Capture → passes → (quantize) → engine-cache lookup → build → store."""
    proto = _capture(model_or_onnx, example_inputs, tmp, input_names, output_names)
    # 2. Passes: cleanup (the FP32 reference), then precision; each graph is serialised once.
    reference = reference_graph(proto)
    reference_bytes = proto_bytes(reference)
    processed, quant_report = _process(reference, config, calibration_data, quant, preprocessing, progress)
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
        record = {
            "inputs": [s.as_dict() for s in _static_io(result.inputs, config)],
            "outputs": [s.as_dict() for s in _static_io(result.outputs, config)],
            "profiles": list(result.profiles),
            "precision": {
                "requested": config.precision,
                "built": built_precision,
                "node_dtypes": dtype_summary(processed.model),
                "fp32_nodes": dict(float_plan.fp32_nodes) if float_plan else {},
            },
            "builder": {**result.builder,
                        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                        "config": config.key_fields(), "trtforge_version": __version__},
            "onnx_sha256": hashlib.sha256(processed_bytes).hexdigest(),
            "reference_onnx_sha256": hashlib.sha256(reference_bytes).hexdigest(),
            "notes": notes,
            "quantization": quant_report,
        }
        built = _Built(key=key, plan=result.plan, processed_onnx=processed_bytes, reference_onnx=reference_bytes,
                       record=json.loads(json.dumps(record)))
        if engine_cache is not None:
            engine_cache.put(key, built.files(), {
                "model": name, "precision": built_precision, "targets": list(config.targets),
                "options": file_suffix(config).lstrip("_"), "engine_size": len(result.plan),
            })
        return built


def build_matrix(
    model_or_onnx: Any,
    example_inputs: Any = None,
    *,
    targets: Sequence[str],
    multi_target: bool = True,
    console: Console | None = None,
    **options: Any,
) -> list[Artifact]:
    """One engine per compute capability (TensorRT-RTX), and one multi-target engine when asked.

    Every engine gets its target suffix (``_sm86``; ``_sm80_sm86_sm89`` for the multi-target one)
    and its size in its sidecar; a table compares them. ``options`` go to ``compile``.

    Example:
        >>> arts = build_matrix(model, (x,), targets=["sm80", "sm86", "sm89", "sm120"], precision="fp16")
        >>> [a.engine_path.name for a in arts][-1]
        'efficientnet_lite0_fp16_sm80_sm86_sm89_sm120.engine'
    """
    from rich.table import Table

    targets = [str(t).lower() for t in targets]
    if not targets:
        raise ValueError("build_matrix needs targets=[...], e.g. ['sm80', 'sm86', 'sm89', 'sm120']")
    if "targets" in options:
        raise TypeError("build_matrix takes targets= once, as its own argument")
    for target in targets:  # refuse an unknown target before the first (expensive) build
        BuildConfig.create(precision=options.get("precision", "fp16"), targets=[target])
    console = console or Console(stderr=True)
    plans: list[list[str]] = [[t] for t in targets] + ([targets] if multi_target and len(targets) > 1 else [])
    artifacts = [compile(model_or_onnx, example_inputs, targets=plan, console=console, **options) for plan in plans]
    table = Table(title="build matrix")
    for column in ("targets", "engine", "bytes", "cache"):
        table.add_column(column)
    for plan, art in zip(plans, artifacts, strict=True):
        hit = (art.sidecar.builder.cache or {}).get("hit")
        table.add_row(",".join(plan), art.engine_path.name, f"{art.sidecar.engine_size:,}", "hit" if hit else "built")
    console.print(table)
    return artifacts
