"""What ``tune`` tunes: the model (a module, an ONNX file, an artifact, a factory) and the user's data, checked
against each other before any work.

Example:
    >>> subject = open_subject("model.onnx", "data.npz")
    >>> subject.input_names, subject.samples
    (('x',), 16)
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from trtforge.core.errors import InvalidArgument, WrongType, spelled
from trtforge.core.preprocessing import PreprocessConfig

DATA_FLAG = ("--data", "data=")


@dataclass(frozen=True)
class Subject:
    """The model to compile (``source``: a module or an ONNX path), the PyTorch model for the PyTorch routes
    (None for a graph), the file-name stem, the data (one array per input, samples along axis 0)."""

    source: Any
    model: Any
    name: str
    input_names: tuple[str, ...]
    data: dict[str, np.ndarray]
    preprocessing: PreprocessConfig | None = None

    @property
    def samples(self) -> int:
        return next(iter(self.data.values())).shape[0]

    @property
    def data_sha256(self) -> str:
        digest = hashlib.sha256()
        for name in self.input_names:
            array = np.ascontiguousarray(self.data[name])
            digest.update(f"{name}:{array.dtype}:{array.shape}".encode())
            digest.update(array.tobytes())
        return digest.hexdigest()

    def example_inputs(self) -> tuple | None:
        """A module's example inputs (the first sample of each array); None for a graph."""
        if isinstance(self.source, Path):
            return None
        import torch

        return tuple(torch.from_numpy(np.ascontiguousarray(self.data[n][:1])) for n in self.input_names)

    def rows(self, count: int) -> dict[str, np.ndarray]:
        """``count`` samples (the data repeated when it holds fewer)."""
        return {n: np.ascontiguousarray(np.resize(a, (count, *a.shape[1:])) if a.shape[0] < count else a[:count])
                for n, a in self.data.items()}


def _read_data(data: Any) -> dict[str, np.ndarray]:
    from trtforge.measure.inputs import read_npz

    if isinstance(data, (str, Path)):
        if Path(data).suffix != ".npz":
            raise InvalidArgument(f"{spelled(*DATA_FLAG)} {data}: give an .npz with one array per model input "
                                  "(samples along axis 0), e.g. numpy.savez('data.npz', x=samples)")
        return read_npz(Path(data))
    if isinstance(data, Mapping):
        return {str(k): np.asarray(v.numpy() if hasattr(v, "numpy") else v) for k, v in data.items()}
    raise WrongType(f"data= takes an .npz path or a dict of arrays (one per input), not {type(data).__name__}")


def _onnx_inputs(path: Path) -> dict[str, tuple[str, tuple[int, ...]]]:
    """An ONNX file's graph inputs: name → (numpy dtype name, dims with -1 for dynamic)."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    initializers = {i.name for i in graph.initializer}
    found = {}
    for value in graph.input:
        if value.name in initializers:
            continue
        tensor = value.type.tensor_type
        dims = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in tensor.shape.dim)
        found[value.name] = (np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type)).name, dims)
    return found


def check_data(data: dict[str, np.ndarray], expected: dict[str, tuple[str, tuple[int, ...]]] | None,
               positional: tuple[int, int] | None = None) -> tuple[str, ...]:
    """The input names, in the model's order; data that does not fit the model's inputs is refused in one line."""
    flag = spelled(*DATA_FLAG)
    if not data:
        raise InvalidArgument(f"{flag} holds no arrays; save one array per model input")
    counts = {a.shape[0] if a.ndim else 0 for a in data.values()}
    if len(counts) != 1 or 0 in counts:
        raise InvalidArgument(f"{flag}: every array needs the same leading (sample) dim of 1 or more, got "
                              f"{ {n: a.shape for n, a in data.items()} }")
    if expected is None:
        low, high = positional or (0, len(data))
        if not low <= len(data) <= high:
            raise InvalidArgument(f"{flag} holds {len(data)} array(s) ({', '.join(data)}) and the model's forward takes "
                                  f"{low}..{high}; save one array per forward argument, in order")
        return tuple(data)
    if set(data) != set(expected):
        raise InvalidArgument(f"{flag} holds {sorted(data)}, the model takes {sorted(expected)}: save one array per "
                              "input, named like the input")
    for name, (dtype, dims) in expected.items():
        shape = data[name].shape
        if len(shape) != len(dims) or any(d > 0 and s != d for s, d in zip(shape[1:], dims[1:], strict=False)):
            raise InvalidArgument(f"{flag} array {name!r} has samples shaped {shape[1:]}, the model's input "
                                  f"{name!r} takes {tuple('?' if d < 0 else d for d in dims[1:])}")
        if data[name].dtype.name != dtype:
            raise InvalidArgument(f"{flag} array {name!r} is {data[name].dtype.name}, the model's input takes "
                                  f"{dtype}; save it as {dtype}")
    return tuple(expected)


def _forward_arity(model: Any) -> tuple[int, int]:
    params = [p for p in inspect.signature(model.forward).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return sum(p.default is p.empty for p in params), len(params)


def _resolve(model_or_artifact: Any) -> tuple[Any, Any, str | None, PreprocessConfig | None]:
    """(what to compile, the PyTorch model or None, a name or None, the preprocessing or None)."""
    from trtforge.runtime.load import model_from_factory

    if not isinstance(model_or_artifact, (str, Path)):
        if not hasattr(model_or_artifact, "forward"):
            raise WrongType(f"tune takes a torch.nn.Module, an .onnx file, an artifact's .json or a "
                            f"package.module:function factory, not {type(model_or_artifact).__name__}")
        return model_or_artifact, model_or_artifact.eval(), None, None
    text = str(model_or_artifact)
    path = Path(text)
    if path.suffix == ".onnx":
        if not path.is_file():
            raise InvalidArgument(f"no ONNX file at {path}")
        return path, None, None, None
    if path.suffix in (".json", ".engine"):
        from trtforge.core.sidecar import read_sidecar

        sidecar = read_sidecar(path)
        factory = sidecar.source.factory
        model = model_from_factory(factory) if factory else None
        stem = sidecar.name.removesuffix(f"_{sidecar.precision.built}")
        return sidecar.verify_source_file("reference"), model, stem, sidecar.preprocessing
    if text.startswith("zoo:"):
        text = f"trtforge.zoo:{text[4:]}"
    if ":" in text:  # named on the command line by the user: trusted as check --model is
        model = model_from_factory(text, trust_factory=True)
        return model, model, None, None
    raise InvalidArgument(f"{text}: give an .onnx file, an artifact's .json, zoo:NAME or package.module:function")


def open_subject(model_or_artifact: Any, data: Any, name: str | None = None,
                 preprocessing: Any = None) -> Subject:
    """The model and its data, checked against each other (names, sample shapes, dtypes) before any work."""
    arrays = _read_data(data)
    source, model, found_name, found_preprocessing = _resolve(model_or_artifact)
    if isinstance(source, Path):
        names = check_data(arrays, _onnx_inputs(source))
    else:
        names = check_data(arrays, None, _forward_arity(source))
    from trtforge.pipeline.paths import default_name

    stem = name or found_name or default_name(source)
    prep = PreprocessConfig.of(preprocessing) if preprocessing is not None else found_preprocessing
    return Subject(source, model, stem, names, {n: arrays[n] for n in names}, prep)
