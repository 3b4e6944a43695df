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
import sys
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
from trtforge.builder.progress import stage_progress
from trtforge.builder.timing_cache import check_timing_cache_path
from trtforge.cache.engine_cache import CacheEntry, EngineCache, engine_key, open_engine_cache
from trtforge.capture.export import export_onnx, normalize_example_inputs, training_flags_kept
from trtforge.capture.onnx_file import check_onnx_path, load_onnx
from trtforge.core.atomic import Payload, atomic_write_all, folder_lock
from trtforge.core.config import (
    MAX_NAME_LENGTH,
    CompileConfig,
    ConfigError,
    QuantConfig,
    option_spelling,
    unused_quant_options,
)
from trtforge.core.errors import (
    FileConflict,
    InvalidArgument,
    NotAFolder,
    NotPermitted,
    Unsupported,
    WrongType,
    spelled,
)
from trtforge.core.hashing import sha256_file
from trtforge.core.sidecar import Sidecar, check_writable, is_trtforge_sidecar, sidecar_bytes
from trtforge.core.specs import TensorSpec, shape_value_candidates
from trtforge.passes.graph import dtype_summary, proto_bytes
from trtforge.passes.process import Processed, process, reference_graph
from trtforge.passes.range_probe import probe

log = logging.getLogger(__name__)


class AccuracyBudgetMissed(Unsupported):
    """``strict_accuracy=True`` and the INT8 graph missed its error budget on the held-back samples."""


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
    """A valid file-name stem from the file's stem or the module's class (``_best.onnx`` → ``best``).

    Example:
        >>> default_name(Path("_best.onnx")), default_name(Path("[x].onnx"))
        ('best', 'x')
    """
    if isinstance(model_or_onnx, (str, Path)):
        stem = Path(model_or_onnx).stem
    else:
        stem = getattr(model_or_onnx, "trtforge_name", None) or type(model_or_onnx).__name__
        stem = re.sub(r"(?<!^)(?=[A-Z])", "_", stem).lower()
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", stem).lstrip("._-")[:MAX_NAME_LENGTH].rstrip("._-")
    return stem or "model"


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


def _capture(model_or_onnx: Any, example_inputs: Any, tmp: Path, config: CompileConfig,
             console: Console | None = None) -> onnx.ModelProto:
    """The model as ONNX: a file as it is, a module exported with a dynamic batch on its batched inputs
    (a spinner with the elapsed time shows while the exporter runs)."""
    if isinstance(model_or_onnx, (str, Path)):
        return load_onnx(Path(model_or_onnx))
    input_names = config.input_names or getattr(model_or_onnx, "trtforge_input_names", None)
    output_names = config.output_names or getattr(model_or_onnx, "trtforge_output_names", None)
    with stage_progress(f"{config.name}: exporting {type(model_or_onnx).__name__} to ONNX (torch.onnx)",
                        enabled=config.progress, console=console):
        path = export_onnx(model_or_onnx, example_inputs, tmp / "captured.onnx", input_names=input_names,
                           output_names=output_names, dynamic_batch=True, batched_inputs=config.batched_inputs)
    return load_onnx(path)


def _static_io(inputs: tuple[TensorSpec, ...], outputs: tuple[TensorSpec, ...],
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
    # Bound to today's stderr: the exporter's quiet block swaps sys.stderr while the export spinner runs.
    console = console or Console(file=sys.stderr)
    engine_cache = open_engine_cache(config.cache_dir) if config.cache else None
    if engine_cache is None and config.cache:  # unwritable: warned once; the op-support table stays in memory
        config = replace(config, cache=False)
    with contextlib.ExitStack() as stack:
        stack.enter_context(training_flags_kept(model_or_onnx))
        request = _request_key(model_or_onnx, example_inputs, config, engine_cache)
        built = _lookup_request(stack, engine_cache, request)
        if built is None:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="trtforge-")))
            if config.path == "direct":
                built = _convert_and_build(model_or_onnx, example_inputs, config, engine_cache=engine_cache,
                                           console=console, calibration_data=calibration_data)
            else:
                built = _capture_and_build(model_or_onnx, example_inputs, config, tmp=tmp,
                                           calibration_data=calibration_data, engine_cache=engine_cache,
                                           console=console)
            if request is not None:
                try:
                    engine_cache.remember_request(request, built.key)
                except OSError as exc:
                    warn_cache(engine_cache, exc)
        check_budget(built.record.get("quantization"), config)
        if built.hit:
            log.info("cache hit: %s (%s…)", config.name, built.key[:12])
            if config.progress:
                console.print(f"[green]cache hit[/] {escape(config.name)} ({built.key[:12]}…)")
        return write_artifact(model_or_onnx, config, paths, built, cached=engine_cache is not None)


def check_budget(report: Mapping[str, Any] | None, config: CompileConfig) -> None:
    """A missed INT8 error budget: a warning line, or (``strict_accuracy=True``) a refusal before writing."""
    budget = (report or {}).get("error_budget")
    if not isinstance(budget, Mapping) or budget.get("holds", True):
        return
    measured = ", ".join(f"{x.get('measured', float('nan')):.4g}" for x in budget.get("limits", ()))
    message = (f"the INT8 build misses its error budget ({budget.get('description')}: measured {measured}); "
               f"loosen it ({spelled(cli='--error-budget', python='error_budget=')}), try "
               f"{spelled(cli='--placement auto', python='placement=' + repr('auto'))}, or build fp16")
    if config.strict_accuracy:
        raise AccuracyBudgetMissed(message + "; nothing was written (strict_accuracy)")
    log.warning(message)


def validate(model_or_onnx: Any, example_inputs: Any, config: CompileConfig | None, calibration_data: Any,
             overrides: Mapping[str, Any]) -> tuple[CompileConfig, OutputPaths]:
    """Every cheap check, before capture, passes or build start; the config with its name resolved."""
    config = (config or CompileConfig()).with_overrides(**overrides)
    config.check_toolchain()
    if config.timing_cache is not None:
        config = replace(config, timing_cache=check_timing_cache_path(config.timing_cache))
    if config.precision != "int8" and calibration_data is not None:
        raise ConfigError(f"calibration_data= is used only by precision='int8' (this build is {config.precision!r}); "
                          "drop it, or ask for precision='int8'")
    if config.precision == "int8" and calibration_data is None:
        raise ConfigError(spelled(
            cli="--precision int8 needs --calib DATA (an image folder or a .npy/.npz file); see docs/quantization.md",
            python="precision='int8' needs calibration_data= (an image folder, a .npy file, an array, "
                   "an iterable of input dicts, or a callable); see docs/quantization.md"))
    _check_direct(model_or_onnx, config)
    ignored = unused_quant_options(config)
    if ignored:
        log.warning("%s: int8 option(s) that this %s build ignores; drop them, or build int8", ", ".join(ignored),
                    config.precision)
    name = default_name(model_or_onnx) if config.name is None else config.name
    preprocessing = config.preprocessing
    if preprocessing is None:
        preprocessing = getattr(model_or_onnx, "preprocessing", None)
    config = replace(config, name=name, preprocessing=preprocessing)
    _check_model(model_or_onnx, example_inputs)
    paths = OutputPaths(prepare_output_dir(config.output_dir), name, config.precision, file_suffix(config))
    check_destinations(paths, config.possible_precisions)
    if not config.overwrite:  # the fp16 files an int8 build may fall back to are checked when written
        check_same_build(paths.sidecar(config.precision), config, _source_info(model_or_onnx))
    reference = paths.reference_onnx()
    if reference.exists() and not any(is_trtforge_sidecar(p) for p in paths.directory.glob(f"{name}_*.json")):
        raise FileConflict(
            f"{reference} exists and no trtforge sidecar of {name!r} is beside it; refusing to overwrite a "
            "file trtforge did not write. Move it away or choose another name=."
        )
    return config, paths


def differing_options(sidecar: Path, config: CompileConfig, source: Mapping[str, Any]) -> list[str]:
    """The options (and source facts) in which the trtforge build at ``sidecar`` differs from this one."""
    try:
        old = json.loads(sidecar.read_text())
    except (OSError, ValueError, RecursionError):
        return []
    recorded = (old.get("builder") or {}).get("config") or {}
    new = json.loads(json.dumps(config.key_fields(), default=str))
    differ = [f"{key} {recorded.get(key)!r} → {new.get(key)!r}" for key in sorted(set(recorded) | set(new))
              if key in recorded and recorded.get(key) != new.get(key)]
    old_source = old.get("source") or {}
    for key in ("kind", "module", "factory"):
        if key in source and key in old_source and old_source[key] != source[key]:
            differ.append(f"source {key} {old_source[key]!r} → {source[key]!r}")
    return differ


def check_same_build(sidecar: Path, config: CompileConfig, source: Mapping[str, Any]) -> None:
    """Refuse to replace a different trtforge build of the same name (unless ``overwrite=True``)."""
    if not is_trtforge_sidecar(sidecar):
        return
    differ = differing_options(sidecar, config, source)
    if differ:
        raise FileConflict(
            f"{sidecar} holds a different trtforge build of {config.name!r} ({'; '.join(differ)}); refusing to "
            f"replace it. {_choose_another()}")


def check_same_model(paths: OutputPaths, reference_sha256: str, overwrite: bool) -> None:
    """Refuse to replace the reference graph of another model written under the same name."""
    reference = paths.reference_onnx()
    if not reference.is_file():
        return
    old_sha256 = sha256_file(reference)
    if old_sha256 == reference_sha256:
        return
    if overwrite:
        siblings = sorted(p.name for p in paths.directory.glob(f"{paths.name}_*.json") if p != paths.sidecar()
                          and _reference_sha256(p) == old_sha256)
        if siblings:
            log.warning("%s replaces %s, the reference graph that %s also name(s); their onnxruntime route, check "
                        "and compare will refuse the new graph's hash: rebuild them too, or build this one under "
                        "another name", spelled(cli="--overwrite", python="overwrite=True"), reference.name,
                        ", ".join(siblings))
        return
    raise FileConflict(
        f"{reference} holds another model's graph (its sha256 differs: other weights or another network under "
        f"the same name {paths.name!r}); refusing to replace it. {_choose_another()}")


def _reference_sha256(sidecar: Path) -> str | None:
    """The reference graph's sha256 a sidecar records (None when it is not a readable trtforge sidecar)."""
    try:
        return (json.loads(sidecar.read_text()).get("source") or {}).get("reference_onnx_sha256")
    except (OSError, ValueError, RecursionError, AttributeError):
        return None


def _choose_another() -> str:
    return (f"Choose another name ({option_spelling('name', 'NAME')}) or output folder, or pass "
            f"{spelled(cli='--overwrite', python='overwrite=True')}")


def _check_direct(model_or_onnx: Any, config: CompileConfig) -> None:
    """What the direct path cannot take: an ONNX file; at INT8, auto placement and SmoothQuant."""
    if config.path != "direct":
        return
    if isinstance(model_or_onnx, (str, Path)):
        raise ConfigError(f"path='direct' converts a PyTorch module, and {model_or_onnx} is a file; pass the "
                          "nn.Module with example inputs, or build the .onnx with path='onnx'")
    quant = config.quant if config.quant is not None else QuantConfig()
    if config.precision == "int8" and quant.placement != "default":
        raise ConfigError("placement='auto' measures layers on the ONNX graph and is not on the direct path; "
                          "use placement='default' with include=/exclude=, or path='onnx'")
    if config.precision == "int8" and quant.smoothquant is not None:
        raise ConfigError("smoothquant= rewrites the ONNX graph and is not on the direct path; drop it, "
                          "or use path='onnx'")


def _check_model(model_or_onnx: Any, example_inputs: Any) -> None:
    """A module whose example inputs fit its ``forward``, or an existing file."""
    if not isinstance(model_or_onnx, (str, Path)):
        import torch

        if not isinstance(model_or_onnx, torch.nn.Module):
            raise WrongType(
                f"compile() takes a torch.nn.Module or a path to an .onnx file, not {type(model_or_onnx).__name__}"
            )
        normalize_example_inputs(model_or_onnx, example_inputs)
    else:
        check_onnx_path(Path(model_or_onnx))


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
    """Every file staged, then moved in with the sidecar last, under a lock on the folder (checks repeated there)."""
    with folder_lock(paths.directory):
        return _write_locked(model_or_onnx, config, paths, built, cached=cached)


def _write_locked(model_or_onnx: Any, config: CompileConfig, paths: OutputPaths, built: _Built, *,
                  cached: bool) -> Artifact:
    record = built.record
    built_precision = record["precision"]["built"]
    if not config.overwrite:  # again, under the lock: a concurrent build may have written this name meanwhile
        check_same_build(paths.sidecar(built_precision), config, _source_info(model_or_onnx))
    engine_path = paths.engine(built_precision)
    onnx_path = reference_path = None
    source = {**_source_info(model_or_onnx), **record.get("source", {})}
    files: list[tuple[Path, Payload, int | None]] = []
    if built.processed_onnx is not None:  # the ONNX path; the direct path makes no ONNX
        check_same_model(paths, record["reference_onnx_sha256"], config.overwrite)
        onnx_path, reference_path = paths.onnx(built_precision), paths.reference_onnx()
        files = [(onnx_path, built.processed_onnx, None), (reference_path, built.reference_onnx, None)]
        source.update({"onnx_file": onnx_path.name, "onnx_sha256": record["onnx_sha256"],
                       "reference_onnx_file": reference_path.name,
                       "reference_onnx_sha256": record["reference_onnx_sha256"]})
    cache_info = {"key": built.key, "hit": built.hit} if cached else {"enabled": False}
    sidecar = Sidecar(
        name=config.name,
        engine_file=engine_path.name,
        engine_size=built.engine_size,
        engine_sha256=built.engine_sha256,
        inputs=tuple(TensorSpec.from_dict(d) for d in record["inputs"]),
        outputs=tuple(TensorSpec.from_dict(d) for d in record["outputs"]),
        profiles=tuple(record["profiles"]),
        precision=record["precision"],
        builder={**record["builder"], "cache": cache_info},
        source=source,
        preprocessing=config.preprocessing,
        notes=(*config.notes, *record["notes"]),
        quantization=record["quantization"],
        shape_inputs=tuple(record.get("shape_inputs") or ()),
    )
    sidecar_path = paths.sidecar(built_precision)
    check_writable(sidecar_path)
    # Every file is staged first and the sidecar moved in last: a full disk or Ctrl-C leaves none.
    atomic_write_all([(engine_path, built.plan, None), *files, (sidecar_path, sidecar_bytes(sidecar), None)])
    return Artifact(engine_path=engine_path, sidecar_path=sidecar_path, onnx_path=onnx_path,
                    reference_onnx_path=reference_path, sidecar=Sidecar.from_dict(sidecar.to_dict(), sidecar_path))


@dataclass(frozen=True)
class _Built:
    """One build's products: fresh (bytes), or a cache hit (the checked blobs, linked into place when written)."""

    key: str
    plan: Payload
    #: The processed and reference graphs; None on the direct path (no ONNX is made).
    processed_onnx: Payload | None
    reference_onnx: Payload | None
    #: JSON-able facts of the build: inputs, outputs, profiles, precision, builder, hashes, notes.
    record: dict
    #: The engine's sha256 (hashed once: by the build, or checked by the cache).
    engine_sha256: str
    hit: bool = False

    @property
    def engine_size(self) -> int:
        return self.plan.stat().st_size if isinstance(self.plan, Path) else len(self.plan)

    def files(self) -> dict[str, bytes]:
        """A fresh build's members, for the engine cache."""
        graphs = {"processed.onnx": self.processed_onnx, "reference.onnx": self.reference_onnx}
        members = {"engine": self.plan, "record.json": json.dumps(self.record).encode(),
                   **{name: data for name, data in graphs.items() if data is not None}}
        return {name: data.read_bytes() if isinstance(data, Path) else data for name, data in members.items()}

    @classmethod
    def fresh(cls, key: str, plan: bytes, record: dict, processed_onnx: bytes | None = None,
              reference_onnx: bytes | None = None) -> _Built:
        return cls(key=key, plan=plan, processed_onnx=processed_onnx, reference_onnx=reference_onnx, record=record,
                   engine_sha256=hashlib.sha256(plan).hexdigest())

    @classmethod
    def from_entry(cls, entry: CacheEntry) -> _Built:
        paths = entry.paths
        return cls(key=entry.key, plan=paths["engine"], processed_onnx=paths.get("processed.onnx"),
                   reference_onnx=paths.get("reference.onnx"), record=json.loads(entry.read("record.json")),
                   engine_sha256=entry.sha256("engine"), hit=True)


def probe_feeds(model_or_onnx: Any, example_inputs: Any, reference: ir.Model) -> list[dict[str, Any]]:
    """The inputs the range probe runs: a module's example inputs, or a dict of arrays given with an ONNX file."""
    names = [v.name for v in reference.graph.inputs if not v.is_initializer()]
    if isinstance(model_or_onnx, (str, Path)):
        if isinstance(example_inputs, Mapping):
            return [{k: _numpy(v) for k, v in example_inputs.items()}]
        return []
    args, kwargs = normalize_example_inputs(model_or_onnx, example_inputs)
    tensors = [*args, *kwargs.values()]
    return [dict(zip(names, map(_numpy, tensors), strict=True))] if len(tensors) == len(names) else []


def _numpy(value: Any) -> Any:
    return value.detach().cpu().numpy() if hasattr(value, "detach") else value


def flavour_keep(reference: ir.Model, config: CompileConfig, keep: Mapping[str, str]) -> dict[str, str]:
    """FP16/BF16: the nodes the installed TensorRT cannot build in that type, found by single-node probe builds.

    Answers are cached per flavour, version and dtype under the engine cache folder (in memory with
    ``cache=False``). Each refused node stays FP32 with TensorRT's reason.
    """
    from trtforge.builder.op_probe import refusal
    from trtforge.cache.op_support import UNKNOWN, OpSupport
    from trtforge.core import trt
    from trtforge.passes.float16 import infer_types, plan_float
    from trtforge.passes.graph import copy_model
    from trtforge.passes.op_probe import probe_graphs

    dtype, precision = config.float_dtype, config.precision
    typed = infer_types(copy_model(reference))
    skip = set(plan_float(typed, dtype, keep).fp32_nodes)
    info = trt.info()
    table = OpSupport(EngineCache(config.cache_dir).directory if config.cache else None, info.flavour, info.version,
                      dtype)
    probes = probe_graphs(typed, dtype, skip)
    table.put({sig: refusal(proto.SerializeToString(), precision) for sig, (_, proto) in probes.items()
               if table.get(sig) is UNKNOWN})
    kept = {}
    for signature, (names, _) in probes.items():
        reason = table.get(signature)
        if isinstance(reason, str):
            op = signature.split("|", 1)[0]
            kept.update({name: f"{op}: {info.flavour} {info.version} cannot run it in {precision.upper()} ({reason})"
                         for name in names})
    return kept


def _check_probe_feeds(reference: ir.Model, feeds: Mapping[str, Any], precision: str) -> None:
    """The range probe runs the graph on the example inputs: they must give every graph input."""
    missing = [v.name for v in reference.graph.inputs if not v.is_initializer() and v.name not in feeds]
    if missing:
        raise InvalidArgument(
            f"the example inputs miss graph input(s) {missing}; the {precision} range probe runs the graph on "
            f"them: give every input in the dict (name → array), e.g. {{{missing[0]!r}: array, ...}}")


def _process(reference: ir.Model, config: CompileConfig, calibration_data: Any,
             feeds: list[dict[str, Any]]) -> tuple[Processed, dict | None]:
    """The processed graph for ``config.precision`` (INT8: quantize first, for the plan) and the INT8 report.

    FP16/BF16: the range probe runs the reference on ``feeds`` and keeps what leaves the low type's range.
    """
    if config.precision != "int8":
        if feeds and config.float_dtype:
            _check_probe_feeds(reference, feeds[0], config.precision)
        keep = probe(reference, feeds, config.float_dtype) if feeds and config.float_dtype else {}
        if config.float_dtype:
            keep.update(flavour_keep(reference, config, keep))
        return process(reference, config.precision, keep=keep or None, keep_fp32=config.fp32_patterns), None
    from trtforge.quantize.quantizer import quantize_model

    result = quantize_model(reference, calibration_data, config.quant if config.quant is not None else QuantConfig(),
                            preprocessing=config.preprocessing, progress=config.progress)
    processed = process(result.fp32, "int8", result.plan)
    if processed.built_precision != "int8":
        log.warning(no_int8_line(config.name, result.plan.excluded))
    return processed, result.report


def no_int8_line(name: str, excluded: Sequence[tuple[str, str]]) -> str:
    """The warning when an INT8 build quantizes no layer: the engine is FP16, and so are its file names."""
    why = f"{len(excluded)} candidate layer(s) kept in FP16, e.g. {excluded[0][0]}: {excluded[0][1]}" if excluded \
        else "the graph has no Conv, MatMul or Gemm layer that INT8 speeds up"
    return (f"precision int8: no layer was quantized ({why}); the engine is FP16 and is written as {name}_fp16.*. "
            "Build fp16 directly, or see the sidecar's quantization report (trtforge inspect)")


def _capture_and_build(model_or_onnx: Any, example_inputs: Any, config: CompileConfig, *, tmp: Path,
                       calibration_data: Any, engine_cache: EngineCache | None, console: Console) -> _Built:
    """Capture → passes → (quantize) → engine-cache lookup → build → store."""
    name, progress = config.name, config.progress
    proto = _capture(model_or_onnx, example_inputs, tmp, config, console)
    # 2. Passes: cleanup (the FP32 reference), then precision; each graph is serialised once.
    reference = reference_graph(proto)
    if config.dynamic_batch:  # a static file made batchable, proven on the reference (passes.dynamic_batch)
        from trtforge.passes.dynamic_batch import make_batch_dynamic

        reference = make_batch_dynamic(reference, config.batched_inputs)
    reference_bytes = proto_bytes(reference)
    feeds = probe_feeds(model_or_onnx, example_inputs, reference)
    processed, quant_report = _process(reference, config, calibration_data, feeds)
    float_plan, built_precision = processed.float_plan, processed.built_precision
    processed_bytes = reference_bytes if processed.model is reference else proto_bytes(processed.model)
    network_name = f"{name}_{built_precision}"
    shape_values = shape_value_candidates(feeds[0]) if feeds else {}
    build_config = _with_example_batch(config, reference, feeds)
    key = engine_key(processed_bytes, build_config, network_name=network_name, shape_values=shape_values)
    with engine_cache.lock(key) if engine_cache is not None else contextlib.nullcontext():
        entry = engine_cache.get(key) if engine_cache is not None else None
        if entry is not None:
            return _Built.from_entry(entry)
        staged = tmp / "processed.onnx"
        staged.write_bytes(processed_bytes)
        # 3. Build.
        source = str(model_or_onnx) if isinstance(model_or_onnx, (str, Path)) else type(model_or_onnx).__name__
        result: BuildResult = build_engine(staged, build_config, name=network_name, progress=progress, console=console,
                                           source=source, input_values=shape_values)
        notes = []
        if float_plan is not None and float_plan.fp32_nodes:
            notes.append(f"{len(float_plan.fp32_nodes)} node(s) kept in FP32 by the float pass")
        precision = {"requested": config.precision, "built": built_precision,
                     "node_dtypes": dtype_summary(processed.model),
                     "fp32_nodes": dict(float_plan.fp32_nodes) if float_plan else {}}
        record = _build_record(result, config, precision, notes, quantization=quant_report,
                               onnx_sha256=hashlib.sha256(processed_bytes).hexdigest(),
                               reference_onnx_sha256=hashlib.sha256(reference_bytes).hexdigest())
        built = _Built.fresh(key, result.plan, record, processed_bytes, reference_bytes)
        _store(engine_cache, built, config)
        return built


def _with_example_batch(config: CompileConfig, reference: ir.Model, feeds: list[dict[str, Any]]) -> CompileConfig:
    """``batch=None`` builds the example's batch N (as ``1:N:N``) where the graph's batch is dynamic
    (``builder.profiles.example_batch``); the sidecar still records the options as given."""
    if config.batch is not None or not feeds:
        return config
    from trtforge.builder.profiles import example_batch

    specs = [TensorSpec(v.name, "", tuple(d if isinstance(d, int) else -1 for d in v.shape or ()))
             for v in reference.graph.inputs if not v.is_initializer()]
    batch = example_batch(specs, feeds[0], config.batched_inputs)
    return config if batch is None else replace(config, batch=batch)


def _build_record(result: BuildResult, config: CompileConfig, precision: dict, notes: list[str],
                  **facts: Any) -> dict:
    """The JSON-able record of one build (the sidecar's inputs, outputs, profiles, precision, builder),
    plus path-specific ``facts`` (graph hashes, quantization, source)."""
    inputs, outputs = _static_io(result.inputs, result.outputs, result.profiles)
    record = {
        "inputs": [s.as_dict() for s in inputs],
        "outputs": [s.as_dict() for s in outputs],
        "profiles": list(result.profiles),
        "precision": precision,
        "builder": {**result.builder, "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                    "config": config.key_fields(), "trtforge_version": __version__},
        "notes": notes,
        "quantization": None,
        "shape_inputs": [{"name": k, "values": v} for k, v in result.shape_values.items()],
        **facts,
    }
    return json.loads(json.dumps(record))


def _store(engine_cache: EngineCache | None, built: _Built, config: CompileConfig) -> None:
    """Put a fresh build into the engine cache (when there is one; a cache that cannot store warns)."""
    if engine_cache is not None:
        store_in_cache(engine_cache, built.key, built, {
            "model": config.name, "precision": built.record["precision"]["built"], "targets": list(config.targets),
            "options": file_suffix(config).lstrip("_"), "engine_size": built.engine_size,
        })


def _direct_int8(model: Any, args: tuple, config: CompileConfig, calibration_data: Any,
                 input_names: Sequence[str] | None):
    """INT8 on the direct path: calibrate the module (``quantize.module_calibration``) and hand the
    scales of the layers placed in INT8 to the lowering as a frozen mapping.

    Example:
        >>> plan, scales = _direct_int8(model, (x,), config, Path("calib/"), None)
    """
    import inspect

    import numpy as np

    from trtforge.convert.int8 import Int8Scales, LayerScales
    from trtforge.quantize.data import load_calibration
    from trtforge.quantize.module_calibration import calibrate_module

    quant = config.quant if config.quant is not None else QuantConfig()
    params = [p.name for p in inspect.signature(model.forward).parameters.values() if p.kind is not p.VAR_POSITIONAL]
    names = list(input_names or [params[i] if i < len(params) else f"input_{i}" for i in range(len(args))])
    if len(names) != len(args):
        raise InvalidArgument(f"input_names={names} names {len(names)} input(s) and {len(args)} example input(s) "
                              "were given; pass one name per input")
    specs = [(name, np.dtype(str(x.dtype).removeprefix("torch.")), (None, *x.shape[1:]))
             for name, x in zip(names, args, strict=True)]
    samples = load_calibration(calibration_data, specs, config.preprocessing, quant.max_images)
    plan = calibrate_module(model, names, samples, quant)
    scales = Int8Scales.of({path: LayerScales(act, weights) for path, (act, weights) in plan.int8_modules().items()})
    return plan, scales


def _int8_report(plan: Any, config: CompileConfig, applied: Mapping[str, str]) -> dict:
    """The sidecar's quantization record for a direct-path INT8 build; a layer placed in INT8 that the
    lowering found no convolution/product with a constant weight for is listed as kept in FP16."""
    quant = config.quant if config.quant is not None else QuantConfig()
    excluded = plan.excluded() + [
        {"layer": path, "reason": "the direct path found no convolution or product with a constant weight in it"}
        for path in plan.int8_modules() if path not in applied]
    return {"calibrator": plan.calibrator, "percentile": quant.percentile, "smoothquant_alpha": None,
            "bias_correction": "not on the direct path", "placement": "default", "task": quant.task,
            "samples": {"calibration": plan.samples}, "int8_layers": len(applied),
            "layers_total": len(plan.decisions), "excluded_layers": excluded}


def _convert_and_build(model: Any, example_inputs: Any, config: CompileConfig, *,
                       engine_cache: EngineCache | None, console: Console, calibration_data: Any = None) -> _Built:
    """The direct path: PyTorch → (INT8: calibrate) → TensorRT network (trtforge.convert) → engine-cache
    lookup → build → store.

    The key hashes the recorded network and the converters' source; no ONNX is made.
    """
    from trtforge.builder.build import build_network
    from trtforge.convert.api import lower_for_profiles

    args, kwargs = normalize_example_inputs(model, example_inputs)
    if kwargs:
        raise WrongType("path='direct' takes positional example inputs; pass a tuple of tensors in forward's order")
    build_config = config  # the model's own batch when none is asked: the example's, static
    if config.batch is None:
        rows = args[0].shape[0] if args and hasattr(args[0], "shape") and args[0].dim() else 1
        build_config = replace(config, batch=((int(rows),) * 3,))
    input_names = config.input_names or getattr(model, "trtforge_input_names", None)
    output_names = config.output_names or getattr(model, "trtforge_output_names", None)
    int8_plan, int8 = None, None
    if config.precision == "int8":
        int8_plan, int8 = _direct_int8(model, args, config, calibration_data, input_names)
    lowered = lower_for_profiles(model, args, build_config.batch,
                                 precision="fp16" if int8 is not None else config.precision,
                                 input_names=None if input_names is None else list(input_names),
                                 output_names=None if output_names is None else list(output_names), int8=int8)
    network_name = f"{config.name}_{config.precision}"
    converter_hash = _converter_hash(config)
    key = engine_key(lowered.net.record.canonical(), config, network_name=network_name, converter_hash=converter_hash)
    with engine_cache.lock(key) if engine_cache is not None else contextlib.nullcontext():
        entry = engine_cache.get(key) if engine_cache is not None else None
        if entry is not None:
            return _Built.from_entry(entry)
        net = lowered.net
        result = build_network(net.builder, net.net, net.logger, build_config, name=network_name,
                               progress=config.progress, console=console)
        precision = {"requested": config.precision, "built": config.precision, "node_dtypes": {},
                     "fp32_nodes": dict(lowered.fp32_nodes)}
        notes = ["direct path (PyTorch → TensorRT, no ONNX): no .onnx beside the engine, so no onnxruntime route"]
        if lowered.fp32_nodes:
            notes.append(f"{len(lowered.fp32_nodes)} node(s) kept in FP32 by the direct path's float rules")
        quantization = None
        if int8_plan is not None:
            quantization = _int8_report(int8_plan, config, lowered.int8_layers)
            notes.append(f"direct-path INT8: {len(lowered.int8_layers)} layer(s) with Q/DQ from forward-hook "
                         "calibration, the rest FP16; no bias correction and no held-back accuracy report")
        record = _build_record(result, config, precision, notes, source={"path": "direct"}, quantization=quantization)
        record["builder"]["converter_hash"] = converter_hash
        built = _Built.fresh(key, result.plan, record)
        _store(engine_cache, built, config)
        return built


def store_in_cache(engine_cache: EngineCache, key: str, built: _Built, meta: dict) -> bool:
    """Store a finished build; a cache that cannot store (full disk, no permission) warns, never fails the build."""
    try:
        engine_cache.put(key, built.files(), meta)
    except OSError as exc:
        warn_cache(engine_cache, exc)
        return False
    return True


def warn_cache(engine_cache: EngineCache, exc: OSError) -> None:
    """One warning line: the engine cache could not store this build (the engine is still delivered)."""
    if engine_cache.store_failed:  # said once per compile, not once per file
        return
    engine_cache.store_failed = True
    message = (f"the engine cache {engine_cache.directory} could not store this build ({exc.strerror or exc}); "
               f"the engine is written all the same. Free space there or pass "
               f"{spelled(cli='--no-cache', python='cache=False')}")
    log.warning(message)


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
    console = console or Console(file=sys.stderr)
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
