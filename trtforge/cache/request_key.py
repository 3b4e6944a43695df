"""The cheap request key: what ``compile`` was asked, hashed without exporting anything.

It maps to the engine key in the engine cache, so a repeated ``compile`` skips export, passes
and build. It covers everything capture and the passes read: for a module, the source files of
every module class in it, its structure (``repr``), its state_dict bytes, the example inputs' names,
shapes and dtypes (and, for FP16/BF16, their values: the range probe runs on them); for an ONNX file, its bytes and those of its external data files; plus every
compile option that reaches the engine, and the versions of torch, onnx, onnx-ir, onnxscript,
TensorRT and trtforge. Requests it cannot hash (int8 with calibration data) get no request key;
they still hit at the engine key, after capture and quantization.

Example:
    >>> key = request_key(model, (torch.zeros(1, 3, 224, 224),), CompileConfig(name="lite0"))
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import inspect
import os
from pathlib import Path
from typing import Any

from trtforge.cache.engine_cache import digest_of, toolchain
from trtforge.core.config import CompileConfig
from trtforge.core.hashing import sha256_and_find, sha256_file
from trtforge.core.specs import shape_value_candidates

#: Distributions whose versions change the captured or processed graph.
GRAPH_LIBRARIES: tuple[str, ...] = ("torch", "onnx", "onnx-ir", "onnxscript")


def _versions() -> dict[str, str]:
    found = {}
    for dist in GRAPH_LIBRARIES:
        try:
            found[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            found[dist] = "absent"
    return found


def _source_file_sha256(path: str) -> str:
    """sha256 of the file that defines a module class (the whole file: stricter than the class, and cheap)."""
    try:
        stat = os.stat(path)
    except OSError:
        return "unreadable"
    return _cached_sha256(path, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=512)
def _cached_sha256(path: str, mtime_ns: int, size: int) -> str:
    return sha256_file(Path(path))


def onnx_fingerprint(path: Path) -> dict[str, Any]:
    """sha256 of an ONNX file and of every external data file it names.

    The file is read once; it is parsed only when it can name external data (the ``location`` key
    of a tensor's ``external_data`` appears in its bytes), so a hit on a plain ONNX file never parses
    it. A file that is not ONNX gets its clear error from the capture, after the lookup misses.
    """
    path = Path(path)
    digest, mentions = sha256_and_find(path, b"location")
    locations = _external_locations(path) if mentions else set()
    return {
        "onnx_sha256": digest,
        "external": {loc: sha256_file(path.parent / loc) for loc in sorted(locations)},
    }


def _external_locations(path: Path) -> set[str]:
    """The external data files the ONNX file at ``path`` names (its tensors' ``location``)."""
    import onnx

    from trtforge.capture.onnx_file import check_external_data, load_onnx

    try:
        proto = onnx.load(str(path), load_external_data=False)
    except Exception:  # noqa: BLE001 - protobuf raises many types; load_onnx says what is wrong
        load_onnx(path)
        raise
    check_external_data(proto, path)  # a missing file is named, not a bare [Errno 2]
    locations = set()
    for tensor in proto.graph.initializer:
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            locations.update(e.value for e in tensor.external_data if e.key == "location")
    return locations


def module_fingerprint(model: Any, example_inputs: Any) -> dict[str, Any]:
    """Class sources, structure, state_dict bytes and example input shapes of a ``torch.nn.Module``."""
    import torch

    from trtforge.capture.export import normalize_example_inputs

    sources = {}
    for cls in sorted({type(m) for m in model.modules()}, key=lambda c: f"{c.__module__}.{c.__qualname__}"):
        try:
            source_file = inspect.getsourcefile(cls)
        except TypeError:
            source_file = None
        sources[f"{cls.__module__}.{cls.__qualname__}"] = _source_file_sha256(source_file) if source_file else "none"
    state = hashlib.sha256()
    for name, tensor in model.state_dict(keep_vars=False).items():
        flat = tensor.detach().to("cpu").contiguous().reshape(-1)
        state.update(f"{name}|{flat.dtype}|{tuple(tensor.shape)}|".encode())
        state.update(flat.view(torch.uint8).numpy().tobytes())
    args, kwargs = normalize_example_inputs(model, example_inputs)
    return {
        "module": f"{type(model).__module__}.{type(model).__qualname__}",
        "sources": sources,
        "structure": hashlib.sha256(repr(model).encode()).hexdigest(),
        "state_sha256": state.hexdigest(),
        "args": [[str(t.dtype), list(t.shape)] for t in args],
        "kwargs": {k: [str(t.dtype), list(t.shape)] for k, t in sorted(kwargs.items())},
        "input_names": list(getattr(model, "trtforge_input_names", None) or []),
        "output_names": list(getattr(model, "trtforge_output_names", None) or []),
    }


def example_values_sha256(example_inputs: Any) -> str | None:
    """sha256 over the example inputs' values (the FP16/BF16 range probe runs on them), or None without any."""
    if example_inputs is None:
        return None
    digest = hashlib.sha256()
    for key, value in sorted(_named(example_inputs).items()):
        array = value.detach().cpu().numpy() if hasattr(value, "detach") else value
        digest.update(f"{key}|{getattr(array, 'dtype', '')}|{getattr(array, 'shape', '')}|".encode())
        digest.update(array.tobytes() if hasattr(array, "tobytes") else repr(array).encode())
    return digest.hexdigest()


def request_key(model_or_onnx: Any, example_inputs: Any, config: CompileConfig, *,
                converter_hash: str | None = None) -> str:
    """sha256 over what ``compile`` was asked (see the module docstring): the model and every option
    that changes the engine or the graph (``config.key_fields()``, ``config.graph_fields()``); on the
    direct path also the converters' source hash."""
    if isinstance(model_or_onnx, (str, Path)):
        model = {"kind": "onnx", **onnx_fingerprint(Path(model_or_onnx))}
    else:
        model = {"kind": "torch", **module_fingerprint(model_or_onnx, example_inputs)}
    fields: dict[str, Any] = {
        "kind": "request",
        "model": model,
        "config": config.key_fields(),
        "graph": config.graph_fields(),
        "example_values": example_values_sha256(example_inputs) if config.float_dtype else None,
        "libraries": _versions(),
        **toolchain(),
    }
    if converter_hash is not None:
        fields["converter_hash"] = converter_hash
    shape_values = shape_value_candidates(_named(example_inputs))
    if shape_values:  # TensorRT builds a shape tensor's values into the engine, at any precision
        fields["shape_values"] = shape_values
    return digest_of(fields)


def _named(example_inputs: Any) -> dict[Any, Any]:
    """The example inputs by name (a dict) or position."""
    if isinstance(example_inputs, dict):
        return example_inputs
    if isinstance(example_inputs, (list, tuple)):
        return dict(enumerate(example_inputs))
    return {} if example_inputs is None else {0: example_inputs}
