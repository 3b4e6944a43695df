"""Capture a ``torch.nn.Module`` as ONNX: the dynamo exporter first, TorchScript as fallback.

Example:
    >>> path = export_onnx(model, (torch.zeros(1, 3, 224, 224),), Path("m.onnx"),
    ...                    input_names=["images"], output_names=["logits"], dynamic_batch=True)
"""

from __future__ import annotations

import contextlib
import inspect
import io
import logging
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from trtforge.core.errors import InvalidArgument, plain

log = logging.getLogger(__name__)

#: Opset for captured graphs: ≥ 19 so FP16 Q/DQ scales are legal, and LayerNormalization exists.
OPSET = 20


class ExampleInputsError(InvalidArgument):
    """The example inputs do not fit the model's ``forward``."""


def normalize_example_inputs(model: torch.nn.Module, example_inputs: Any) -> tuple[tuple, dict]:
    """``Tensor`` | tuple | list | dict → (args, kwargs), checked against ``forward``'s signature."""
    if example_inputs is None:
        raise ExampleInputsError(
            "a torch.nn.Module needs example_inputs, e.g. compile(model, (torch.randn(1, 3, 224, 224),))"
        )
    if isinstance(example_inputs, torch.Tensor):
        args, kwargs = (example_inputs,), {}
    elif isinstance(example_inputs, Mapping):
        args, kwargs = (), dict(example_inputs)
    elif isinstance(example_inputs, Sequence):
        args, kwargs = tuple(example_inputs), {}
    else:
        raise ExampleInputsError(
            f"example_inputs must be a Tensor, a tuple/list of Tensors or a dict of Tensors, "
            f"not {type(example_inputs).__name__}"
        )
    for i, value in enumerate(list(args) + list(kwargs.values())):
        if not isinstance(value, torch.Tensor):
            raise ExampleInputsError(f"example input {i} is a {type(value).__name__}; pass torch Tensors")
    try:
        inspect.signature(model.forward).bind(*args, **kwargs)
    except TypeError as exc:
        raise ExampleInputsError(
            f"example_inputs do not fit {type(model).__name__}.forward{inspect.signature(model.forward)}: "
            f"{exc}. Pass one tensor per forward argument."
        ) from exc
    return args, kwargs


def check_forward(model: torch.nn.Module, args: tuple, kwargs: dict) -> Any:
    """Run ``forward`` once on the example inputs; a shape error becomes an ExampleInputsError."""
    try:
        with torch.no_grad():
            return model(*args, **kwargs)
    except (RuntimeError, ValueError, TypeError, IndexError) as exc:
        shapes = [tuple(t.shape) for t in list(args) + list(kwargs.values())]
        raise ExampleInputsError(
            f"{type(model).__name__}.forward failed on example inputs of shapes {shapes}: {exc}. "
            "Give example inputs of the shape and dtype the model expects."
        ) from exc


def _input_names(model: torch.nn.Module, args: tuple, kwargs: dict, given: Sequence[str] | None) -> list[str]:
    if given is not None:
        names = list(given)
        if len(names) != len(args) + len(kwargs):
            raise ExampleInputsError(
                f"input_names has {len(names)} names for {len(args) + len(kwargs)} example inputs"
            )
        return names
    params = [p for p in inspect.signature(model.forward).parameters if p not in ("self",)]
    return params[: len(args)] + list(kwargs)


def _output_count(outputs: Any) -> int:
    if isinstance(outputs, torch.Tensor):
        return 1
    if isinstance(outputs, Mapping):
        return len(outputs)
    if isinstance(outputs, Sequence):
        return len(outputs)
    raise ExampleInputsError(f"model returned {type(outputs).__name__}; return tensors, a tuple or a dict")


def root_cause(exc: BaseException) -> BaseException:
    """The innermost exception of a chain: the exporter wraps the error that says what failed."""
    seen = {id(exc)}
    while exc.__cause__ is not None and id(exc.__cause__) not in seen:
        exc = exc.__cause__
        seen.add(id(exc))
    return exc


def export_onnx(
    model: torch.nn.Module,
    example_inputs: Any,
    path: Path,
    *,
    input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
    dynamic_batch: bool = True,
) -> Path:
    """Export ``model`` to ``path`` (one file, no external data); returns ``path``.

    The batch axis (dim 0 of every input) is dynamic when ``dynamic_batch`` is set.
    """
    model = model.eval()
    args, kwargs = normalize_example_inputs(model, example_inputs)
    outputs = check_forward(model, args, kwargs)
    names = _input_names(model, args, kwargs, input_names)
    n_out = _output_count(outputs)
    out_names = list(output_names) if output_names else (["output"] if n_out == 1 else [f"output_{i}" for i in range(n_out)])
    path = Path(path)
    try:
        _export_dynamo(model, args, kwargs, path, names, out_names, dynamic_batch)
    except Exception as exc:  # noqa: BLE001 - the exporter raises many types; we log and fall back
        cause = root_cause(exc)
        log.warning("dynamo ONNX export failed (%s: %s); falling back to the TorchScript exporter",
                    type(cause).__name__, plain(str(cause)).strip().split("\n", 1)[0])
        _export_torchscript(model, args, kwargs, path, names, out_names, dynamic_batch)
    return path


@contextlib.contextmanager
def _quiet_exporter_logs(level: int = logging.ERROR):
    """Hold the exporter's chatter (missing torchvision ops, constant-folding notes) while it runs."""
    loggers = [logging.getLogger(name) for name in ("torch.onnx", "onnxscript")]
    saved = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(level)
    try:
        yield
    finally:
        for lg, lvl in zip(loggers, saved, strict=True):
            lg.setLevel(lvl)


def _export_dynamo(model, args, kwargs, path, names, out_names, dynamic_batch) -> None:
    dynamic_shapes = None
    if dynamic_batch:
        batch = torch.export.Dim("batch", min=1, max=4096)
        sig = inspect.signature(model.forward)
        bound = sig.bind(*args, **kwargs)
        dynamic_shapes = {k: {0: batch} for k in bound.arguments}
    quiet = io.StringIO()
    with warnings.catch_warnings(), contextlib.redirect_stdout(quiet), _quiet_exporter_logs():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(
            model, args, kwargs=kwargs or None, dynamo=True, external_data=False,
            input_names=names, output_names=out_names, dynamic_shapes=dynamic_shapes,
            opset_version=OPSET, optimize=True, verbose=False,
        )
    program.save(str(path), external_data=False)


def _export_torchscript(model, args, kwargs, path, names, out_names, dynamic_batch) -> None:
    if kwargs:
        raise ExampleInputsError("the TorchScript exporter fallback needs positional example inputs")
    axes = {n: {0: "batch"} for n in names + out_names} if dynamic_batch else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model, args, str(path), dynamo=False, input_names=names, output_names=out_names,
            dynamic_axes=axes, opset_version=OPSET,
        )
