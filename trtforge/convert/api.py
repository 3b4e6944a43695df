"""The direct path's entry points: convert a module to a plan, or report its coverage.

Example:
    >>> plan, record = convert_module(model, (torch.randn(2, 3, 224, 224),), CompileConfig(batch=(1, 8, 32)))
    >>> evaluate(record.record, {"x": torch.randn(4, 3, 224, 224)})   # the reference evaluator
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import torch

from trtforge.convert.converters import source_hash
from trtforge.convert.lower import Lowered, at_batch_rule, export_program, lower_graph, program_constants
from trtforge.convert.network import Network, Record
from trtforge.core.batch import BatchProfile
from trtforge.core.config import FLOAT_OF_PRECISION, FLOAT_PRECISIONS, CompileConfig
from trtforge.core.errors import InvalidArgument
from trtforge.core.quant_plan import QuantPlan

#: The direct path's precisions (``core.config``'s float ones) → the torch dtype its network computes in.
PRECISION_DTYPES: dict[str, torch.dtype] = {p: getattr(torch, FLOAT_OF_PRECISION[p] or "float32")
                                            for p in FLOAT_PRECISIONS}


@dataclass(frozen=True)
class Conversion:
    """What the direct path made: the recorded network, its input/output names, folded and converted
    nodes, nodes kept FP32 (with the reason), the converter-source hash, and the build time."""

    record: Record
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    converted: dict[str, str] = field(default_factory=dict)
    folded: tuple[str, ...] = ()
    fp32_nodes: dict[str, str] = field(default_factory=dict)
    converter_hash: str = ""
    build_seconds: float = 0.0


def symbolic_shapes(net: Network, batch: tuple[int, int, int]) -> dict[str, tuple[tuple[int, ...], ...]]:
    """Each dynamic input's (min, opt, max) shape, its dims that are expressions of the export's batch symbol
    (``s0``, ``4*s0``: a partition's inputs are inner tensors) evaluated at ``batch``: ``CompileConfig.shapes``,
    from which the one builder derives the profile (``builder.profiles.resolve_profiles``).

    Example:
        >>> symbolic_shapes(lowered.net, (1, 8, 32))["x"]
        ((1, 3, 224, 224), (8, 3, 224, 224), (32, 3, 224, 224))
    """
    shapes = {}
    for name, _dtype, shape in net.record.inputs:
        if -1 in shape:
            exprs = net.dynamic_dims.get(name, shape)
            shapes[name] = tuple(tuple(_size(e, d, b) for e, d in zip(exprs, shape, strict=True)) for b in batch)
    return shapes


def _size(expr, dim: int, batch: int) -> int:
    """A profile size: static dims as they are; a batch expression (``s0``, ``4*s0``) at ``batch``."""
    if dim != -1:
        return dim
    if isinstance(expr, int):
        return batch
    return int(expr.subs({symbol: batch for symbol in expr.free_symbols}))


def build_lowered(net: Network, batch: tuple[int, int, int] = (1, 1, 1), optimization_level: int = 3):
    """Build a lowered network with the one builder (``builder.build.build_network``) and a ``CompileConfig``
    holding its shapes: a ``BuildResult`` (plan, seconds, profiles). Raises BuildFailedError with the log."""
    from trtforge.builder.build import build_network
    from trtforge.core.config import CompileConfig

    config = CompileConfig(shapes=symbolic_shapes(net, batch), optimization_level=optimization_level, progress=False)
    return build_network(net.builder, net.net, net.logger, config, name=net.net.name, progress=False)


def precision_dtype(precision: str) -> torch.dtype:
    if precision not in PRECISION_DTYPES:
        raise InvalidArgument(f"precision={precision!r}; pass one of {', '.join(PRECISION_DTYPES)}")
    return PRECISION_DTYPES[precision]


def lower_module(model: torch.nn.Module, example_inputs: tuple, *, batch: tuple[int, int, int] | None = None,
                 precision: str = "fp32", output_names: list[str] | None = None,
                 input_names: list[str] | None = None, int8: QuantPlan | None = None) -> Lowered:
    """Export ``model`` and lower all of it into a TensorRT network (raises on any unconverted op);
    ``int8``: Q/DQ around the layers of the modules it names, the rest in ``precision``; under FP16/BF16 the range
    probe runs the export on ``example_inputs`` (``convert.fp32_plan``)."""
    program = export_program(model, example_inputs, batch)
    return lower_graph(program.graph_module.graph, program_constants(program),
                       precision=precision_dtype(precision), output_names=output_names,
                       input_names=input_names, name=type(model).__name__, int8=int8, example_inputs=example_inputs)


def export_batch(profiles: Sequence[BatchProfile]) -> tuple[int, int, int]:
    """The one batch range ``torch.export`` needs to cover every profile: (smallest min, the first
    profile's opt, largest max).

    Example:
        >>> export_batch(parse_batch("1:1:1,1:8:32"))
        (1, 1, 32)
    """
    return min(p.min for p in profiles), profiles[0].opt, max(p.max for p in profiles)


def examples_at(example_inputs: tuple, size: int) -> tuple:
    """Each tensor input with dim 0 resized to ``size`` (its leading rows, repeated when it has fewer),
    so the export sees a batch its profiles allow; other arguments as they are.

    Example:
        >>> examples_at((torch.zeros(1, 3),), 2)[0].shape
        torch.Size([2, 3])
    """
    def resize(x):
        if not isinstance(x, torch.Tensor) or x.dim() == 0 or x.shape[0] == size:
            return x
        repeats = -(-size // x.shape[0])
        return x.repeat(repeats, *([1] * (x.dim() - 1)))[:size]

    return tuple(resize(x) for x in example_inputs)


def lower_for_profiles(model: torch.nn.Module, example_inputs: tuple, profiles: Sequence[BatchProfile], *,
                       precision: str = "fp32", input_names: list[str] | None = None,
                       output_names: list[str] | None = None, int8: QuantPlan | None = None) -> Lowered:
    """Lower ``model`` for ``trtforge.compile``'s batch profiles (exported as ``export_inputs`` says).

    Example:
        >>> lowered = lower_for_profiles(model, (torch.zeros(1, 3, 16, 16),), parse_batch("1:4:8"))
    """
    inputs, batch = export_inputs(example_inputs, profiles)
    return lower_module(model, inputs, batch=batch, precision=precision, input_names=input_names,
                        output_names=output_names, int8=int8)


def export_inputs(example_inputs: tuple, profiles: Sequence[BatchProfile]) -> tuple[tuple, tuple | None]:
    """``(example inputs, batch)`` for ``export_program`` that cover ``profiles``: a static batch when
    every profile is that one size, else dim 0 dynamic over their range with the example batch moved into
    it (at least 2, since ``torch.export`` specialises sizes 0 and 1).

    Example:
        >>> export_inputs((torch.zeros(1, 3),), parse_batch("1:4:8"))[1]
        (1, 4, 8)
    """
    low, opt, high = export_batch(profiles)
    first = next((x for x in example_inputs if isinstance(x, torch.Tensor) and x.dim()), None)
    given = first.shape[0] if first is not None else low
    size = low if low == high else min(max(given, low, 2), high)
    return examples_at(example_inputs, size), None if low == high else (low, opt, high)


def convert_module(model: torch.nn.Module, example_inputs: tuple, config: CompileConfig | None = None, *,
                   build: bool = True) -> tuple[bytes | None, Conversion]:
    """Convert ``model`` straight to TensorRT with ``config`` (a ``CompileConfig``: ``batch``, ``precision``,
    ``output_names``, ``optimization_level``; the batch by the one batch rule, ``core.batch.resolve_batch``):
    ``(serialized plan, Conversion)``; plan is None when ``build=False``. ``trtforge.compile(path="direct")``
    is the way in that writes the engine; this is its conversion, for a look at the network.

    Example:
        >>> plan, conv = convert_module(model, (x,), CompileConfig(batch=(1, 4, 16), precision="fp16"))
    """
    config = config if config is not None else CompileConfig(path="direct", progress=False)
    names = None if config.output_names is None else list(config.output_names)
    lowered, profiles = at_batch_rule(config, example_inputs, lambda batch: lower_for_profiles(
        model, example_inputs, batch, precision=config.precision, output_names=names), type(model).__name__)
    plan, seconds = None, 0.0
    if build:
        from trtforge.builder.build import build_network

        net = lowered.net
        result = build_network(net.builder, net.net, net.logger, replace(config, batch=profiles, progress=False),
                               name=net.net.name, progress=False)
        plan, seconds = result.plan, result.seconds
    record = lowered.net.record
    return plan, Conversion(
        record=record, input_names=tuple(n for n, _d, _s in record.inputs), output_names=tuple(record.outputs),
        converted=dict(lowered.converted), folded=tuple(lowered.folded), fp32_nodes=dict(lowered.fp32_nodes),
        converter_hash=source_hash(), build_seconds=seconds)
