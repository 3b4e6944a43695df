"""torch.export with a dynamic batch, decomposition to core ATen, and the walk that lowers an FX graph
through the converter registry into a recorded TensorRT network.

Example:
    >>> program = export_program(model, (torch.randn(2, 3, 224, 224),), batch=(1, 8, 32))
    >>> lowered = lower_graph(program.graph_module.graph, program_constants(program))
    >>> lowered.net.record.kinds()
"""

from __future__ import annotations

import inspect
import logging
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import torch

from trtforge.convert.context import Context, ConversionRefused, SymDim, is_const, static_shape
from trtforge.convert.converters import all_converters
from trtforge.convert.fp32_plan import plan_fp32, readers
from trtforge.convert.network import Network, Tensor
from trtforge.convert.refusals import no_converter_line
from trtforge.convert.registry import REGISTRY, Settings, target_name
from trtforge.core.batch import BatchProfile, constraint_violation, own_batch, resolve_batch
from trtforge.core.errors import InvalidArgument, Unsupported, spelled
from trtforge.core.quant_plan import QuantPlan

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Ops TensorRT-RTX must not see fused at FP32: kept whole so our converter decomposes them.
KEEP_WHOLE = ("scaled_dot_product_attention",)
#: Folding these at conversion time would freeze randomness or effects into constants.
NEVER_FOLD = frozenset({"aten.rand.default", "aten.randn.default", "aten.bernoulli.p", "aten.native_dropout.default"})


class UnsupportedOp(Unsupported):
    """No converter exists for an op in a graph that must convert entirely."""


def decompositions() -> dict:
    """The core ATen decomposition table, less the ops we convert whole."""
    table = torch.export.default_decompositions()
    for op in KEEP_WHOLE:
        table.pop(getattr(torch.ops.aten, op).default, None)
    return table


def export_program(model: torch.nn.Module, example_inputs: tuple, batch: tuple[int, int, int] | None = None):
    """``torch.export`` (dim 0 of every input dynamic over ``batch``=(min, opt, max) when min < max),
    then decomposition to core ATen."""
    if not isinstance(example_inputs, tuple):
        raise InvalidArgument("example_inputs must be a tuple of tensors; pass (tensor,) for one input")
    dynamic = None
    if batch is not None:
        low, opt, high = batch
        if not 1 <= low <= opt <= high:
            raise InvalidArgument(f"batch={batch}: need 1 <= min <= opt <= max; pass e.g. batch=(1, 8, 32)")
        if low < high:
            if any(isinstance(x, torch.Tensor) and x.shape[0] < 2 for x in example_inputs):
                raise InvalidArgument("a dynamic batch needs example inputs with batch ≥ 2 (torch.export "
                                      "specialises sizes 0 and 1); pass e.g. torch.randn(2, ...)")
            dim = torch.export.Dim("batch", min=max(low, 1), max=high)
            dynamic = tuple({0: dim} if isinstance(x, torch.Tensor) else None for x in example_inputs)
            if any(p.kind is p.VAR_POSITIONAL for p in inspect.signature(model.forward).parameters.values()):
                dynamic = (dynamic,)  # forward(*xs): the specs nest like the arguments
    with warnings.catch_warnings():
        # torch's own pytree code warns about its own deprecated check on every export: not the user's to fix
        warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated",
                                category=FutureWarning)
        program = torch.export.export(model.eval(), example_inputs, dynamic_shapes=dynamic)
        return program.run_decompositions(decompositions())


def at_batch_rule(config: Any, args: Sequence[Any], export: Callable[[tuple[BatchProfile, ...]], T],
                  name: str = "module") -> tuple[T, tuple[BatchProfile, ...]]:
    """``export(profiles)`` at the one batch rule's profiles (``core.batch.resolve_batch``; the module's own
    batch where it gives None), and those profiles. Where ``batch=None`` asked ``1:N:N`` and torch.export finds
    the batch fixed, the module is exported at N as it is, with one warning (as the ONNX path's export does).

    Example:
        >>> program, profiles = at_batch_rule(CompileConfig(), args, lambda p: export_program(model, args, ...))
    """
    profiles = resolve_batch(config, args)
    if profiles is None:
        profiles = own_batch(args)
        return export(profiles), profiles
    try:
        return export(profiles), profiles
    except Exception as exc:
        if config.batch is not None or not constraint_violation(exc):
            raise
    fixed = own_batch(args)
    log.warning("%s: torch.export fixes dim 0 at %d, so batch=None builds batch %d as it is (not 1:%d:%d); "
                "pass batch=%d to say so", name, fixed[0].opt, fixed[0].opt, fixed[0].opt, fixed[0].opt, fixed[0].opt)
    return export(fixed), fixed


def program_constants(program) -> dict[str, torch.Tensor]:
    """Placeholder name → tensor for the program's parameters, buffers and lifted constants."""
    sig = program.graph_signature
    state = {**program.state_dict, **program.constants}
    found = {}
    for mapping in (sig.inputs_to_parameters, sig.inputs_to_buffers, sig.inputs_to_lifted_tensor_constants):
        found.update({name: state[target] for name, target in mapping.items()})
    return found


def mark_constants(graph: torch.fx.Graph, constants: dict[str, torch.Tensor]) -> None:
    """Set ``meta["trtforge_const"]`` on nodes known at conversion time (constant propagation)."""
    for node in graph.nodes:
        if node.op == "placeholder":
            node.meta["trtforge_const"] = node.name in constants
        elif node.op == "get_attr":
            node.meta["trtforge_const"] = True
        elif node.op == "call_function":
            inputs = node.all_input_nodes
            node.meta["trtforge_const"] = (target_name(node) not in NEVER_FOLD and bool(inputs)
                                           and all(is_const(n) for n in inputs)) or (
                not inputs and target_name(node) not in NEVER_FOLD and not _symbolic(node))
        else:
            node.meta["trtforge_const"] = False


def _symbolic(node: torch.fx.Node) -> bool:
    value = node.meta.get("val")
    if isinstance(value, torch.SymInt):
        return True
    return isinstance(value, torch.Tensor) and any(not isinstance(d, int) for d in value.shape)


def schema_args(node: torch.fx.Node, env: dict) -> list:
    """The node's arguments in schema order with defaults filled, FX nodes replaced by their values."""
    mapped_args = torch.fx.node.map_arg(node.args, lambda n: env[n])
    mapped_kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: env[n])
    if not isinstance(node.target, torch._ops.OpOverload):
        return list(mapped_args)
    values = list(mapped_args)
    for arg in node.target._schema.arguments[len(values):]:
        if arg.name in mapped_kwargs:
            values.append(mapped_kwargs[arg.name])
        elif arg.has_default_value():
            values.append(arg.default_value)
        else:
            values.append(None)
    return values


@dataclass
class Lowered:
    """A lowered graph: the network (with its record), which nodes were folded or converted, and
    which stayed FP32 under a lower precision (node → reason)."""

    net: Network
    folded: list[str] = field(default_factory=list)
    converted: dict[str, str] = field(default_factory=dict)
    fp32_nodes: dict[str, str] = field(default_factory=dict)
    #: INT8: module path → the node whose input and weight went through Q/DQ
    int8_layers: dict[str, str] = field(default_factory=dict)


def _fold(node: torch.fx.Node, env: dict):
    args = torch.fx.node.map_arg(node.args, lambda n: env[n])
    kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: env[n])
    return node.target(*args, **kwargs)


def _input(ctx: Context, node: torch.fx.Node, name: str):
    value = node.meta["val"]
    if isinstance(value, (torch.SymInt, int)):
        return None  # a size passed into a partition: read from a tensor input (_size_input)
    x = ctx.net.input(name, value.dtype, static_shape(value))
    ctx.net.dynamic_dims[name] = tuple(d if isinstance(d, int) else d.node.expr for d in value.shape)
    return ctx.net.cast(x, ctx.dtype(value.dtype))


def _input_names(graph: torch.fx.Graph, constants: dict, names: list[str] | None) -> dict[str, str]:
    """Placeholder name → network input name: ``names`` in order over the tensor inputs, else their own."""
    tensors = [n.name for n in graph.find_nodes(op="placeholder")
               if n.name not in constants and isinstance(n.meta.get("val"), torch.Tensor)]
    if names is not None and len(names) != len(tensors):
        raise InvalidArgument(f"input_names={list(names)} names {len(names)} input(s), but the model takes "
                              f"{len(tensors)} tensor(s) ({', '.join(tensors)}); pass one name per input")
    return dict(zip(tensors, names or tensors, strict=True))


def _size_input(ctx: Context, node: torch.fx.Node, env: dict, renamed: dict[str, str]):
    """A SymInt placeholder (a partition's size argument) as the matching dim of a tensor input."""
    expr = node.meta["val"].node.expr if isinstance(node.meta["val"], torch.SymInt) else None
    for other, value in env.items():
        name = renamed.get(other.name) if isinstance(other, torch.fx.Node) else None
        dims = ctx.net.dynamic_dims.get(name) if name else None
        if dims and expr in dims:
            return ctx.size_of(value, dims.index(expr))
    if isinstance(node.meta["val"], int):
        return node.meta["val"]
    raise ConversionRefused(f"size input {node.name} ({expr}) matches no dim of a tensor input")


def _partition_fix() -> str:
    """How the reader asks for partitioning: the CLI flag or the Python argument."""
    return spelled(cli="--min-block-size 3", python="min_block_size=3") + " (partitions the module)"


def _call(ctx: Context, node: torch.fx.Node, env: dict, lowered: Lowered):
    name = target_name(node)
    if node.meta.get("trtforge_const"):
        lowered.folded.append(node.name)
        return _fold(node, env)
    entry = REGISTRY.get(name)
    if entry is None:
        raise UnsupportedOp(no_converter_line(name, node) or (
            f"no converter for {name} (node {node.name}); keep it in PyTorch with {_partition_fix()}, "
            f"or register one in your module with @trtforge.convert.converter({name!r}) "
            "(docs/direct-path.md, \"Converters\")"))
    reason = entry.refusal(node, Settings(compute=ctx.compute))
    if reason is not None:
        raise ConversionRefused(f"{name} (node {node.name}) refused: {reason}; keep it in PyTorch with "
                                f"{_partition_fix()}")
    lowered.converted[node.name] = name
    if ctx.compute == torch.float32 or ctx.fp32 is None or not ctx.fp32.keeps(node):
        return entry.fn(ctx, node, schema_args(node, env))
    return _in_fp32(ctx, entry.fn, node, schema_args(node, env))


def _in_fp32(ctx: Context, fn: Callable, node: torch.fx.Node, args: list):
    """A node the FP32 plan keeps: its converter runs at FP32 (its float inputs cast up); its float outputs are
    cast back to the compute precision when a node after it computes in that precision (as the ONNX float pass
    casts), else they stay FP32 (an FP32 node's value that FP16 cannot hold reaches the next FP32 node whole)."""
    low, ctx.compute = ctx.compute, torch.float32
    try:
        out = fn(ctx, node, args)
    finally:
        ctx.compute = low
    if all(user.op == "output" or ctx.fp32.keeps(user) for user in readers(node)):
        return out

    def back(value):
        return ctx.net.cast(value, low) if isinstance(value, Tensor) and value.dtype == torch.float32 else value

    return tuple(back(v) for v in out) if isinstance(out, (tuple, list)) else back(out)


def _outputs(ctx: Context, node: torch.fx.Node, env: dict, names: list[str] | None) -> None:
    values = torch.fx.node.map_arg(node.args[0], lambda n: env[n])
    values = values if isinstance(values, (list, tuple)) else [values]
    for index, value in enumerate(values):
        meta = node.args[0][index].meta["val"] if isinstance(node.args[0], (list, tuple)) else node.args[0].meta["val"]
        kept = isinstance(value, Tensor) and value.dtype == meta.dtype  # an FP32-kept node's output stays FP32
        x = value if kept else ctx.tensor(value, dtype=ctx.dtype(meta.dtype))
        out = ctx.net.cast(x, meta.dtype)
        if out is x:
            out = ctx.net.shuffle(x)  # an output must be a layer's own tensor
        default = "output" if len(values) == 1 else f"output_{index}"  # the ONNX path's names
        ctx.net.output(out, names[index] if names else default)


def lower_graph(graph: torch.fx.Graph, constants: dict[str, torch.Tensor], *, precision: torch.dtype = torch.float32,
                output_names: list[str] | None = None, attrs: Callable[[str], torch.Tensor] | None = None,
                name: str = "trtforge", input_names: list[str] | None = None,
                int8: QuantPlan | None = None, example_inputs: tuple | None = None) -> Lowered:
    """Lower ``graph`` into a new strongly typed network; every call must convert (else raises).
    ``input_names`` rename the tensor inputs in order (default: the placeholders' names); ``int8`` puts
    Q/DQ pairs around the convolutions and products of the modules it names (``convert/int8.py``). Under FP16/BF16
    the FP32 plan (``convert.fp32_plan``, the FP32 rule set with the range probe on ``example_inputs`` when given)
    says which nodes run in FP32."""
    all_converters()
    mark_constants(graph, constants)
    fp32 = None if precision == torch.float32 else plan_fp32(graph, constants, str(precision).removeprefix("torch."),
                                                              example_inputs)
    ctx = Context(Network(name), compute=precision, int8=int8, fp32=fp32)
    lowered = Lowered(ctx.net)
    renamed = _input_names(graph, constants, input_names)
    env: dict = {}
    for node in graph.find_nodes(op="placeholder"):
        env[node] = constants[node.name] if node.name in constants else _input(
            ctx, node, renamed.get(node.name, node.name))
    for node in graph.nodes:
        if node.op == "placeholder":
            if env[node] is None:
                env[node] = _size_input(ctx, node, env, renamed)
        elif node.op == "get_attr":
            env[node] = attrs(node.target)
        elif node.op == "call_function":
            env[node] = _call(ctx, node, env, lowered)
        elif node.op == "output":
            _outputs(ctx, node, env, output_names)
        else:
            raise UnsupportedOp(f"{node.op} {node.target} cannot be lowered; keep it in PyTorch")
    lowered.fp32_nodes.update(fp32.nodes if fp32 is not None else {})
    lowered.int8_layers.update(ctx.int8_layers)
    return lowered


__all__ = ["ConversionRefused", "Lowered", "SymDim", "UnsupportedOp", "export_program", "lower_graph",
           "mark_constants", "program_constants", "schema_args"]
