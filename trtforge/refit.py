"""Refit new weights into an existing engine, in place and atomically, and update its sidecar.

An engine built with ``refittable=True`` (or ``strip_weights=True``) keeps the names of its
weights. ``refit_engine`` reads new weights, checks every name and shape against the graph the
engine was built from (``source.onnx_file`` beside it) before touching TensorRT, hands them to
``trt.Refitter``, serializes the refitted engine (with its weights, also when it was stripped),
replaces the file atomically and writes the new sha256 into the sidecar.

Weight sources:

- a new ``.onnx`` of the same model: it goes through the same passes as at build time (cleanup,
  then the FP16/BF16 cast), and its initializers are taken by name;
- a ``state_dict`` saved with ``torch.save`` (``.pt``/``.pth``): its names must be the reference
  ONNX's initializer names (they are when the exporter kept parameter names; a folded parameter,
  e.g. BatchNorm into Conv, is not, so refit such models from a new ``.onnx``).

Refitting needs the engine deserialized, so it needs a GPU (TensorRT-RTX also compiles refittable
engines only on a GPU). The logic is tested through ``FakeTrtRefitter`` (tests/doubles/refit_double.py)
and every TensorRT name below is checked against the installed bindings.

Example:
    >>> refit_engine(Path("out/lite0_fp16_refittable.engine"), Path("finetuned.onnx"))
    RefitReport(weights=49, ...)
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
from filelock import FileLock

from trtforge.core import trt as trt_shim
from trtforge.core.atomic import atomic_write_bytes
from trtforge.core.config import FLOAT_PRECISIONS
from trtforge.core.errors import InvalidArgument, MissingFile
from trtforge.core.hashing import sha256_file
from trtforge.core.postprocess import NMS, NMS_PREFIX
from trtforge.core.sidecar import GraphEditsRecord, read_sidecar, write_sidecar

#: Every TensorRT attribute the refit path uses ("Class.attribute"); tests check each one exists.
TRT_API_USED: tuple[str, ...] = (
    "Logger", "Logger.WARNING", "Runtime", "Runtime.deserialize_cuda_engine", "Refitter",
    "Refitter.get_all_weights", "Refitter.get_weights_prototype", "Refitter.set_named_weights",
    "Refitter.get_missing_weights", "Refitter.refit_cuda_engine", "Weights", "Weights.dtype", "Weights.size",
    "ICudaEngine.refittable", "ICudaEngine.serialize", "ICudaEngine.create_serialization_config",
    "ICudaEngine.serialize_with_config", "ISerializationConfig.clear_flag", "SerializationFlag.EXCLUDE_WEIGHTS",
    "DataType.FLOAT", "DataType.HALF",
)

#: TensorRT DataType member → numpy dtype for weights handed to the refitter.
#: Weight dtypes refit can write (spec dtype names, as the TensorRT shim's DTYPE_NAMES gives them).
REFIT_DTYPES: tuple[str, ...] = ("float32", "float16", "int32", "int8")

FLOAT_KINDS = ("f",)


class RefitError(InvalidArgument):
    """The new weights do not fit the engine (names, shapes or dtypes), or TensorRT refused them."""


@dataclass(frozen=True)
class RefitReport:
    """What a refit changed."""

    engine: Path
    weights: int
    source: str
    old_sha256: str
    new_sha256: str


def _float_initializers(proto: Any) -> dict[str, np.ndarray]:
    from onnx import numpy_helper

    found = {}
    for init in proto.graph.initializer:
        array = numpy_helper.to_array(init)
        if array.dtype.kind in FLOAT_KINDS:
            found[init.name] = array
    return found


def _process_like_build(proto: Any, built_precision: str, kept: Mapping[str, str] | None = None,
                        edits: GraphEditsRecord | None = None) -> Any:
    """The passes the build ran (``trtforge.passes.process``): the cut (``--outputs``), cleanup, the NMS
    (``--nms``), then the float cast for FP16/BF16.

    ``kept`` are the nodes the build kept in FP32 (the sidecar's record, range probe included), so
    the new weights take the same types without the build's example inputs. ``edits`` are the graph edits
    the sidecar records (``graph_edits``): the NMS's constants get the names and values the engine holds.
    """
    from trtforge.passes.graph import load_ir, to_proto
    from trtforge.passes.process import process, reference_graph

    if built_precision not in FLOAT_PRECISIONS:
        raise RefitError(
            f"refit of a {built_precision} engine is not supported: its quantization scales come from "
            "calibration; rebuild it with trtforge build instead"
        )
    if edits is not None and edits.outputs:
        from trtforge.passes.cut import cut_graph

        model = load_ir(proto)
        cut_graph(model, edits.outputs)
        proto = to_proto(model)
    reference = reference_graph(proto)
    if edits is not None and edits.nms is not None:
        from trtforge.passes.nms import append_nms

        reference = append_nms(reference, NMS(**{f.name: getattr(edits.nms, f.name) for f in fields(NMS)}))
    return to_proto(process(reference, built_precision, keep=kept).model)


def _first_differences(expected: Mapping[str, np.ndarray], given: Mapping[str, np.ndarray]) -> list[str]:
    problems = []
    missing = [n for n in expected if n not in given]
    extra = [n for n in given if n not in expected]
    if missing:
        problems.append(f"missing {missing[:5]}" + (f" and {len(missing) - 5} more" if len(missing) > 5 else ""))
    if extra:
        problems.append(f"unknown to the engine {extra[:5]}" + (f" and {len(extra) - 5} more" if len(extra) > 5 else ""))
    for name in expected:
        if name in given and tuple(given[name].shape) != tuple(expected[name].shape):
            problems.append(f"{name!r} has shape {list(given[name].shape)}, the engine's is {list(expected[name].shape)}")
            break
    return problems


def load_new_weights(weights: Path, sidecar: Any) -> dict[str, np.ndarray]:
    """New weights by engine weight name, checked against the graph the engine was built from."""
    from trtforge.capture.onnx_file import load_onnx

    weights = Path(weights)
    if not weights.is_file():
        raise MissingFile(f"weights file {weights} does not exist; pass a new .onnx or a state_dict .pt")
    src = sidecar.source
    processed_file = sidecar.file(src.onnx_file, "source.onnx_file") if src.onnx_file else sidecar.folder / "?"
    reference_file = (sidecar.file(src.reference_onnx_file, "source.reference_onnx_file")
                      if src.reference_onnx_file else sidecar.folder / "?")
    if not processed_file.is_file():
        raise MissingFile(
            f"{processed_file} (the graph {sidecar.engine_file} was built from) is missing; refit needs it "
            "to check names and shapes. Keep the .onnx files trtforge wrote beside the engine"
        )
    expected = _float_initializers(load_onnx(processed_file))
    built = sidecar.precision.built or "fp32"
    appended = [name for name in expected if name.startswith(NMS_PREFIX)]  # the NMS's constants, not weights
    if appended and (sidecar.graph_edits is None or sidecar.graph_edits.nms is None):
        raise RefitError(f"{sidecar.engine_file} holds an appended NMS that its sidecar does not record (an older "
                         "trtforge built it); rebuild it with trtforge build --nms ... --refittable, then refit")
    if weights.suffix == ".onnx":
        kept = dict(sidecar.precision.fp32_nodes or {})
        given = _float_initializers(_process_like_build(load_onnx(weights), built, kept, sidecar.graph_edits))
        what = "the new ONNX (after the build's passes)"
    elif weights.suffix in (".pt", ".pth"):
        import torch

        state = torch.load(weights, map_location="cpu", weights_only=True)
        if isinstance(state, Mapping) and isinstance(state.get("state_dict"), Mapping):
            state = state["state_dict"]
        if not isinstance(state, Mapping):
            raise RefitError(f"{weights} holds a {type(state).__name__}, not a state_dict; save model.state_dict()")
        reference = _float_initializers(load_onnx(reference_file)) if reference_file.is_file() else expected
        given = {}
        for name, tensor in state.items():
            if name in reference:
                given[name] = tensor.detach().float().numpy()
            elif tensor.is_floating_point() and tensor.numel() > 1:
                given[name] = tensor.detach().float().numpy()  # reported below as unknown to the engine
        given.update({name: expected[name] for name in appended})  # the model's weights change, the NMS's do not
        what = "the state_dict"
    else:
        raise RefitError(f"weights {weights.name}: pass a .onnx file or a state_dict saved as .pt/.pth")
    problems = _first_differences(expected, given)
    if problems:
        raise RefitError(
            f"{what} in {weights.name} does not fit {sidecar.engine_file}: " + "; ".join(problems)
            + ". Refit needs the same architecture with the same weight names; re-export from the same model "
            "class, or rebuild with trtforge build"
        )
    return {name: np.ascontiguousarray(given[name].astype(expected[name].dtype)) for name in expected}


def apply_refit(plan: bytes, new_weights: Mapping[str, np.ndarray], *, stripped: bool, bindings: ModuleType) -> bytes:
    """Deserialize ``plan``, refit every weight the engine names, and serialize it with its weights."""
    trt = bindings
    logger = trt.Logger(trt.Logger.WARNING)
    runtime = trt.Runtime(logger)
    engine = runtime.deserialize_cuda_engine(plan)
    if engine is None:
        raise RefitError("TensorRT could not deserialize the engine (refit needs the GPU it was built for)")
    if not engine.refittable:
        raise RefitError("the engine was not built refittable; rebuild it with refittable=True (--refittable)")
    refitter = trt.Refitter(engine, logger)
    keep = []  # Weights do not copy: keep the arrays alive until refit_cuda_engine returns
    for name in refitter.get_all_weights():
        if name not in new_weights:
            raise RefitError(f"the engine refits weight {name!r}, which the new weights lack")
        prototype = refitter.get_weights_prototype(name)
        dtype = trt_shim.dtype_name(prototype.dtype)
        if dtype not in REFIT_DTYPES:
            raise RefitError(f"weight {name!r} is {dtype} in the engine; refit supports {', '.join(REFIT_DTYPES)}")
        array = np.ascontiguousarray(new_weights[name], dtype=dtype)
        if array.size != prototype.size:
            raise RefitError(f"weight {name!r} has {array.size} values, the engine holds {prototype.size}")
        keep.append(array)
        if not refitter.set_named_weights(name, trt.Weights(array)):
            raise RefitError(f"TensorRT rejected the new weight {name!r}")
    missing = list(refitter.get_missing_weights())
    if missing:
        raise RefitError(f"the engine still misses weights {missing[:5]} after refit")
    if not refitter.refit_cuda_engine():
        raise RefitError("TensorRT's refit_cuda_engine failed (see the log above)")
    if stripped:
        config = engine.create_serialization_config()
        config.clear_flag(trt.SerializationFlag.EXCLUDE_WEIGHTS)
        data = engine.serialize_with_config(config)
    else:
        data = engine.serialize()
    del keep
    return bytes(data)


def refit_engine(engine: Path, weights: Path, *, bindings: ModuleType | None = None) -> RefitReport:
    """Refit ``engine`` in place from ``weights`` (.onnx or state_dict .pt); update its sidecar's hash."""
    sidecar = read_sidecar(Path(engine))
    engine_path = sidecar.verify_engine()
    built = sidecar.builder
    if not (built.refittable or built.weights_stripped):
        raise RefitError(
            f"{engine_path.name} was not built refittable (sidecar builder.refittable is false); rebuild it "
            "with refittable=True (trtforge build --refittable)"
        )
    new_weights = load_new_weights(Path(weights), sidecar)  # names and shapes, before any TensorRT work
    trt = bindings if bindings is not None else trt_shim.bindings()
    with FileLock(str(engine_path) + ".lock"):
        plan = apply_refit(engine_path.read_bytes(), new_weights, stripped=built.weights_stripped,
                           bindings=trt)
        mode = stat.S_IMODE(os.stat(engine_path).st_mode)
        atomic_write_bytes(engine_path, plan, mode=mode)
        refit_record = {
            "weights": Path(weights).name,
            "weights_sha256": sha256_file(Path(weights)),
            "count": len(new_weights),
            "at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "previous_engine_sha256": sidecar.engine_sha256,
        }
        updated = replace(sidecar.with_engine(engine_path),
                          builder=replace(built, weights_stripped=False, refit=refit_record))
        write_sidecar(sidecar.path, updated)
    return RefitReport(engine=engine_path, weights=len(new_weights), source=Path(weights).name,
                       old_sha256=sidecar.engine_sha256, new_sha256=hashlib.sha256(plan).hexdigest())
