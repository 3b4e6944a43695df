"""Capture a ``torch.nn.Module`` as ONNX: the dynamo exporter first, TorchScript as fallback.

Example:
    >>> path = export_onnx(model, (torch.zeros(1, 3, 224, 224),), Path("m.onnx"),
    ...                    input_names=["images"], output_names=["logits"], dynamic_batch=True)
    >>> export_onnx(MatMul(), (torch.zeros(3, 4), torch.zeros(4, 3)), Path("mm.onnx"))  # a: (batch, 4); b: (4, 3)
"""

from __future__ import annotations

import contextlib
import inspect
import io
import logging
import re
import sys
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trtforge.capture.translations import translation_table
from trtforge.core.batch import constraint_violation, guess_batched
from trtforge.core.errors import InvalidArgument, Unsupported, plain

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

#: Opset for captured graphs: ≥ 19 so FP16 Q/DQ scales are legal, and LayerNormalization exists.
OPSET = 20


class ExampleInputsError(InvalidArgument):
    """The example inputs do not fit the model's ``forward``."""


def normalize_example_inputs(model: torch.nn.Module, example_inputs: Any) -> tuple[tuple, dict]:
    """``Tensor`` | tuple | list | dict → (args, kwargs), checked against ``forward``'s signature."""
    import torch

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
    import torch

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
    """One stable name per flat input: parameter names, ``xs_0, xs_1, ...`` for ``*xs``, then kwargs."""
    if given is not None:
        names = list(given)
        if len(names) != len(args) + len(kwargs):
            raise ExampleInputsError(
                f"input_names has {len(names)} names for {len(args) + len(kwargs)} example inputs"
            )
        return names
    names: list[str] = []
    for name, param in inspect.signature(model.forward).parameters.items():
        if len(names) >= len(args):
            break
        if param.kind is inspect.Parameter.VAR_POSITIONAL:
            names += [f"{name}_{i}" for i in range(len(args) - len(names))]
        elif param.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD):
            names.append(name)
    return names + list(kwargs)


def _dynamic_shapes(model: torch.nn.Module, args: tuple, kwargs: dict, flags: list[bool]) -> dict[str, Any]:
    """``dynamic_shapes`` shaped like ``forward``'s signature: dim 0 dynamic where ``flags`` says (flat order).

    Example: ``forward(self, *xs)`` with two batched inputs → ``{"xs": ({0: batch}, {0: batch})}``.
    """
    import torch

    batch = torch.export.Dim("batch", min=1, max=4096)
    params = inspect.signature(model.forward).parameters
    bound = inspect.signature(model.forward).bind(*args, **kwargs)
    positional = iter(flags[: len(args)])
    by_key = dict(zip(kwargs, flags[len(args):], strict=True))

    def spec(batched: bool) -> dict | None:
        return {0: batch} if batched else None

    shapes: dict[str, Any] = {}
    for name, value in bound.arguments.items():
        kind = params[name].kind
        if kind is inspect.Parameter.VAR_POSITIONAL:
            shapes[name] = tuple(spec(next(positional)) for _ in value)
        elif kind is inspect.Parameter.VAR_KEYWORD:
            shapes[name] = {key: spec(by_key[key]) for key in value}
        else:
            shapes[name] = spec(by_key[name] if name in by_key else next(positional))
    return shapes


def _output_count(outputs: Any) -> int:
    import torch

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


class ExportError(Unsupported):
    """Neither exporter could capture the model; the message names the op and the way out."""


#: (pattern in the exporter's reason, the way out). Data: a new known failure is one more row.
EXPORT_REMEDIES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"not factor of input size"),
     "choose an adaptive pooling output size that divides the input size (e.g. 4 for 8), "
     "or use AvgPool/MaxPool with a fixed kernel"),
)
GENERIC_REMEDY = "rewrite that part of forward, or export the model to ONNX yourself and pass the .onnx file"
#: Where exporter messages name the op: "operator adaptive_max_pool1d", "aten.adaptive_max_pool2d".
OP_PATTERNS: tuple[re.Pattern[str], ...] = (re.compile(r"operator ([\w:.]+?)[,. ]"),
                                            re.compile(r"aten[.:]+(\w+)"))


def first_line(exc: BaseException) -> str:
    """The first non-empty line of an exception's message, without terminal codes."""
    lines = [line.strip() for line in plain(str(exc)).splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


def export_failure(model: torch.nn.Module, exc: BaseException, dynamo_reason: str) -> ExportError:
    """One line: the model, the op the exporter names, its reason, and the way out."""
    reason = first_line(root_cause(exc))
    op = next((m.group(1) for p in OP_PATTERNS if (m := p.search(reason) or p.search(dynamo_reason))), None)
    remedy = next((fix for pattern, fix in EXPORT_REMEDIES if pattern.search(reason)), GENERIC_REMEDY)
    reason = re.sub(r"\s*Please feel free to request support.*", "", reason)[:200]
    return ExportError(f"{type(model).__name__} could not be exported to ONNX"
                       f"{f' at {op}' if op else ''}: {reason}; {remedy}")


def not_a_batch(model: torch.nn.Module, names: Sequence[str], reason: str, chosen: Sequence[str] | None) -> str:
    """The one line for dim 0s that are not one shared batch; raised when the user chose them."""
    line = (f"{type(model).__name__}: dim 0 of input(s) {', '.join(map(repr, names))} is not one shared batch "
            f"({reason})")
    if chosen is not None:
        raise ExampleInputsError(f"{line}; leave them out of batched_inputs=, e.g. batched_inputs=[] for a "
                                 "static graph")
    return (f"{line}; exported with static shapes. Say which inputs carry the batch with batched_inputs=[...] "
            "(batched_inputs=[] for none)")


def is_module(obj: Any) -> bool:
    """Whether ``obj`` is a ``torch.nn.Module``, without importing torch: none can exist before torch is loaded."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.nn.Module)


@contextlib.contextmanager
def training_flags_kept(model: Any) -> Iterator[None]:
    """Capture puts the module in eval mode; on leaving, every submodule gets its own ``training`` flag back,
    so ``compile()`` leaves the user's module as it found it. Anything but a module passes through.

    Example:
        >>> net = torch.nn.Linear(2, 2).train()
        >>> with training_flags_kept(net):
        ...     _ = net.eval()
        >>> net.training
        True
    """
    if not is_module(model):
        yield
        return
    flags = [(module, module.training) for module in model.modules()]
    try:
        yield
    finally:
        for module, training in flags:
            module.training = training


def export_onnx(
    model: torch.nn.Module,
    example_inputs: Any,
    path: Path,
    *,
    input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
    dynamic_batch: bool = True,
    batched_inputs: Sequence[str] | None = None,
) -> Path:
    """Export ``model`` to ``path`` (one file, no external data); returns ``path``.

    With ``dynamic_batch``, dim 0 of each batched input is dynamic: ``batched_inputs`` when given,
    else the inputs whose dim 0 equals the first input's (``core.batch.guess_batched``). When
    torch.export finds a dim 0 that is not a free batch, the graph is exported static with one
    warning (or, for inputs the user named, one error line).
    """
    model = model.eval()
    args, kwargs = normalize_example_inputs(model, example_inputs)
    outputs = check_forward(model, args, kwargs)
    names = _input_names(model, args, kwargs, input_names)
    n_out = _output_count(outputs)
    out_names = list(output_names) if output_names else (["output"] if n_out == 1 else [f"output_{i}" for i in range(n_out)])
    flat = [(name, tuple(t.shape)) for name, t in zip(names, [*args, *kwargs.values()], strict=True)]
    batched = guess_batched(flat, batched_inputs) if dynamic_batch else ()
    path = Path(path)
    try:
        _export_dynamo_checked(model, args, kwargs, path, names, out_names, batched, batched_inputs)
        return path
    except ExampleInputsError:
        raise
    except Exception as exc:  # noqa: BLE001 - the exporter raises many types; we log and fall back
        cause = root_cause(exc)
        dynamo_reason = f"{type(cause).__name__}: {first_line(cause)}"
    log.warning("dynamo ONNX export failed (%s); falling back to the TorchScript exporter", dynamo_reason)
    try:
        _export_torchscript(model, args, kwargs, path, names, out_names, batched)
    except ExampleInputsError:
        raise
    except Exception as exc:  # noqa: BLE001 - the TorchScript exporter too
        raise export_failure(model, exc, dynamo_reason) from exc
    return path


def _export_dynamo_checked(model, args, kwargs, path, names, out_names, batched, chosen) -> None:
    """The dynamo export; a batch torch.export cannot keep becomes a static export (or the user's error)."""
    try:
        program = _export_dynamo(model, args, kwargs, path, names, out_names, batched)
    except Exception as exc:
        if not batched or not constraint_violation(exc):
            raise
        log.warning(not_a_batch(model, batched, first_line(root_cause(exc)), chosen))
        program = _export_dynamo(model, args, kwargs, path, names, out_names, ())
    fixed = [value.name for value in program.model.graph.inputs
             if value.name in batched and value.shape is not None and isinstance(value.shape[0], int)]
    if fixed:
        log.warning(not_a_batch(model, fixed, "torch.export fixed it at its example size", chosen))
    program.save(str(path), external_data=False)


#: (logger, level held while exporting): torch.export's guard errors and the exporters' notes would
#: reach the terminal beside the one line trtforge reports.
EXPORTER_LOGGERS: tuple[tuple[str, int], ...] = (
    ("torch.onnx", logging.ERROR), ("onnxscript", logging.ERROR), ("torch._guards", logging.CRITICAL),
    ("torch._dynamo", logging.CRITICAL), ("torch.fx.experimental.symbolic_shapes", logging.CRITICAL),
    ("torch.export", logging.CRITICAL),
)


@contextlib.contextmanager
def _quiet_exporter():
    """Hold the exporter's chatter (guard errors, missing torchvision ops, IR dumps) while it runs."""
    loggers = [(logging.getLogger(name), level) for name, level in EXPORTER_LOGGERS]
    saved = [lg.level for lg, _ in loggers]
    for lg, level in loggers:
        lg.setLevel(level)
    quiet = io.StringIO()
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
            warnings.simplefilter("ignore")
            yield
    finally:
        for (lg, _), lvl in zip(loggers, saved, strict=True):
            lg.setLevel(lvl)


def _export_dynamo(model, args, kwargs, path, names, out_names, batched: Sequence[str]):
    """torch.onnx's dynamo export; dim 0 of each input in ``batched`` dynamic. Returns the ONNXProgram."""
    import torch

    flags = [name in batched for name in names]
    dynamic_shapes = _dynamic_shapes(model, args, kwargs, flags) if any(flags) else None
    with _quiet_exporter():
        program = torch.onnx.export(
            model, args, kwargs=kwargs or None, dynamo=True, external_data=False,
            input_names=names, dynamic_shapes=dynamic_shapes,
            opset_version=OPSET, optimize=True, verbose=False, custom_translation_table=translation_table(),
        )
    name_outputs(program.model.graph, out_names)
    return program


def name_outputs(graph: Any, out_names: Sequence[str]) -> None:
    """Name the graph's outputs ``out_names``; an inner value that already holds one of those names is
    renamed first (torch.onnx's own renaming keeps both: MiniLM's output 'embedding' and its
    aten.embedding node's 'embedding', a graph the ONNX checker refuses)."""
    outputs = list(graph.outputs)
    wanted = set(out_names)
    values = [*graph.inputs, *graph.initializers.values(), *(v for node in graph for v in node.outputs)]
    taken = {v.name for v in values if v.name} | wanted
    for value in values:
        if value.name in wanted and not any(value is out for out in outputs):
            fresh = next(f"{value.name}_{i}" for i in range(1, len(taken) + 2) if f"{value.name}_{i}" not in taken)
            taken.add(fresh)
            value.name = fresh
    for value, name in zip(outputs, out_names, strict=False):
        value.name = name


def _export_torchscript(model, args, kwargs, path, names, out_names, batched: Sequence[str]) -> None:
    import torch

    if kwargs:
        raise ExampleInputsError("the TorchScript exporter fallback needs positional example inputs")
    axes = {n: {0: "batch"} for n in [*batched, *out_names]} if batched else None
    with _quiet_exporter():
        torch.onnx.export(
            model, args, str(path), dynamo=False, input_names=names, output_names=out_names,
            dynamic_axes=axes, opset_version=OPSET,
        )
