"""Accept an existing ``.onnx`` file as it is (external data included) and describe its I/O.

Example:
    >>> proto = load_onnx(Path("model.onnx"))
    >>> inputs, outputs = graph_io(proto)
"""

from __future__ import annotations

from pathlib import Path

import onnx

from trtforge.core.errors import InvalidArgument, MissingFile
from trtforge.core.specs import ONNX_TO_DTYPE, TensorSpec


class NotOnnxError(InvalidArgument):
    """The file is missing or is not an ONNX model."""


def check_onnx_path(path: Path) -> Path:
    """Refuse a model path that is missing or a folder, before anything reads it.

    Example:
        >>> check_onnx_path(Path("models"))
        NotOnnxError: models is a directory; pass the .onnx file inside it
    """
    path = Path(path)
    if not path.exists():
        raise MissingFile(f"model file {path} does not exist; pass an .onnx file or an nn.Module")
    if path.is_dir():
        raise NotOnnxError(f"{path} is a directory; pass the .onnx file inside it")
    if not path.is_file():  # a FIFO or a device (/dev/zero) would block or never end
        raise NotOnnxError(f"{path} is not a regular file (a pipe, device or socket); save the model to an .onnx "
                           "file and pass that")
    return path


def load_onnx(path: Path) -> onnx.ModelProto:
    """Load ``path`` with its external data; a clear error when it is missing or not ONNX."""
    path = check_onnx_path(path)
    try:
        proto = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # noqa: BLE001 - protobuf raises DecodeError/RuntimeError/OSError
        raise NotOnnxError(
            f"{path} is not an ONNX model ({type(exc).__name__}: {exc}); export one with torch.onnx.export"
        ) from exc
    check_external_data(proto, path)
    onnx.load_external_data_for_model(proto, str(path.parent))
    if not proto.graph.node and not proto.graph.output:
        raise NotOnnxError(f"{path} parsed but holds no graph; is it really an ONNX model?")
    check_graph(proto, path)
    return proto


def check_external_data(proto: onnx.ModelProto, path: Path) -> None:
    """Refuse a model whose external-data files are missing, naming the first one (before reading any)."""
    from onnx.external_data_helper import ExternalDataInfo, _get_all_tensors, uses_external_data

    missing = sorted({info.location for tensor in _get_all_tensors(proto) if uses_external_data(tensor)
                      for info in [ExternalDataInfo(tensor)] if not (path.parent / info.location).is_file()})
    if missing:
        raise MissingFile(f"{path} keeps its weights in external data file(s) {missing}, which are not beside it in "
                          f"{path.parent}; copy them there with the .onnx")


def check_graph(proto: onnx.ModelProto, path: Path) -> None:
    """Refuse a graph the ONNX checker rejects (an undefined input, nodes out of order), naming the reason."""
    try:
        if proto.ByteSize() < onnx.checker.MAXIMUM_PROTOBUF:
            onnx.checker.check_model(proto)
        else:
            onnx.checker.check_model(str(path))
    except onnx.checker.ValidationError as exc:
        reason = " ".join(str(exc).split())[:300]
        raise NotOnnxError(f"{path} is not a valid ONNX graph ({reason}); fix or re-export the model") from exc


def _spec(value: onnx.ValueInfoProto) -> TensorSpec:
    ttype = value.type.tensor_type
    dims = tuple(
        int(d.dim_value) if d.HasField("dim_value") and d.dim_value > 0 else -1 for d in ttype.shape.dim
    )
    return TensorSpec(value.name, ONNX_TO_DTYPE.get(ttype.elem_type, f"onnx:{ttype.elem_type}"), dims)


def graph_io(proto: onnx.ModelProto) -> tuple[tuple[TensorSpec, ...], tuple[TensorSpec, ...]]:
    """Graph inputs (initializers excluded) and outputs as TensorSpecs, -1 for dynamic dims."""
    inits = {i.name for i in proto.graph.initializer}
    inputs = tuple(_spec(v) for v in proto.graph.input if v.name not in inits)
    outputs = tuple(_spec(v) for v in proto.graph.output)
    return inputs, outputs
