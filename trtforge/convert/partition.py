"""Partitioning with PyTorch fallback: nodes with no converter, whose validator refuses, or that
``torch_executed_ops`` names stay in PyTorch; supported runs of at least ``min_block_size`` compute
nodes become engines, built by the one builder with the ``CompileConfig`` that ``trtforge.compile``
uses (``compile(model, inputs, path="direct", min_block_size=3)`` runs this code).

The result is an ``nn.Module`` (the exported program's module) whose fused submodules are
``EngineModule``s (a TensorRT plan + its recorded network) or plain PyTorch graph modules. An engine
runs through ``runner``: the default is the reference evaluator, which runs the recorded network on
the CPU; ``trtforge.runtime.partitioned`` runs the plans through the TensorRT route.

Example:
    >>> module, report = partition(model, (x,), batch=(1, 2, 4), min_block_size=3)
    >>> torch.testing.assert_close(module(x), model(x))
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

import torch
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase

from trtforge.convert.api import export_batch, precision_dtype, symbolic_shapes
from trtforge.convert.context import ConversionRefused, static_shape
from trtforge.convert.converters import all_converters
from trtforge.convert.evaluator import evaluate
from trtforge.convert.lower import at_batch_rule, export_program, lower_graph, mark_constants
from trtforge.convert.network import Record
from trtforge.convert.refusals import DATA_DEPENDENT, NO_CONVERTER, data_dependent
from trtforge.convert.registry import DEFAULT_SETTINGS, Settings, target_name
from trtforge.core.config import CompileConfig
from trtforge.core.partition_options import DEFAULT_MIN_BLOCK_SIZE, is_torch_executed
from trtforge.core.routes import EVALUATOR_ROUTE
from trtforge.core.sidecar import ProfileRecord

Runner = Callable[["EngineModule", dict], list]


def node_status(node: torch.fx.Node, settings: Settings = DEFAULT_SETTINGS) -> tuple[str, str]:
    """("folded" | "converted" | "refused" | "unsupported", reason) for one call_function node under
    ``settings`` (validators may refuse by precision)."""
    name = target_name(node)
    if node.meta.get("trtforge_const"):
        return "folded", ""
    entry = all_converters().get(name)
    if entry is None:
        known = NO_CONVERTER.get(name)
        return "unsupported", f"no converter for {name}" + (f": {known.why}" if known else "")
    if data_dependent(node):
        return "refused", DATA_DEPENDENT
    reason = entry.refusal(node, settings)
    return ("refused", reason) if reason else ("converted", "")


class _Supported(OperatorSupportBase):
    def __init__(self, settings: Settings = DEFAULT_SETTINGS, torch_ops: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.settings, self.torch_ops = settings, torch_ops

    def is_node_supported(self, submodules, node: torch.fx.Node) -> bool:
        if node.op != "call_function" or is_torch_executed(target_name(node), self.torch_ops):
            return False
        return node_status(node, self.settings)[0] in ("converted", "folded")


class ReferenceRunner:
    """Run an engine's recorded network with the reference evaluator (CPU, TensorRT semantics)."""

    route = EVALUATOR_ROUTE

    def __call__(self, engine: EngineModule, feeds: dict) -> list:
        return evaluate(engine.record, feeds)


reference_runner = ReferenceRunner()


@runtime_checkable
class RoutedRunner(Protocol):
    """A runner that names the route it runs engine parts on (``ReferenceRunner``, ``runtime.partitioned``'s
    ``TensorRTRunner``)."""

    route: str


def runner_route(runner: Runner) -> str:
    """The route a runner runs engine parts on (a ``RoutedRunner``'s ``route``; a plain callable is named by its
    function's name, else its type's)."""
    if isinstance(runner, RoutedRunner) and runner.route:
        return runner.route
    return getattr(runner, "__name__", type(runner).__name__)


class EngineModule(torch.nn.Module):
    """One engine partition: the plan, its recorded network, how its arguments map to inputs, and its
    optimisation profile ({input: {min, opt, max}}, as a sidecar writes it)."""

    def __init__(self, plan: bytes | None, record: Record, arg_names: list[str], runner: Runner,
                 profile: dict | None = None, outputs: list[tuple[str, torch.dtype, tuple[int, ...]]] | None = None
                 ) -> None:
        super().__init__()
        self.plan, self.record, self.arg_names, self.runner = plan, record, arg_names, runner
        self.profile = profile or {}
        #: (name, dtype, shape with -1 for the dynamic batch) per output, as the sidecar writes them
        self.outputs = outputs or []
        self.input_names = [name for name, _d, _s in record.inputs]
        #: The engine's sidecar on disk, when it was loaded from a saved folder (the TensorRT runner reads it).
        self.sidecar_path = None

    @property
    def route(self) -> str:
        """Where this engine part runs: the runner's route (``tensorrt``, ``evaluator``, ...)."""
        return runner_route(self.runner)

    def forward(self, *args):
        feeds = {n: a for n, a in zip(self.arg_names, args, strict=True) if n in self.input_names}
        outputs = self.runner(self, feeds)
        return outputs[0] if len(outputs) == 1 else tuple(outputs)


@dataclass
class PartitionReport:
    """Which partitions became engines (submodule name → node count) and which stayed in PyTorch (why);
    the exported program it split and the settings, so ``convert.saved`` can save it as a folder."""

    engines: dict[str, int] = field(default_factory=dict)
    pytorch: dict[str, str] = field(default_factory=dict)
    program: Any = None  # the decomposed torch.export ExportedProgram
    min_block_size: int = DEFAULT_MIN_BLOCK_SIZE
    precision: str = "fp32"
    torch_executed_ops: tuple[str, ...] = ()
    optimization_level: int = 3


def _compute_nodes(nodes) -> int:
    return sum(1 for n in nodes if node_status(n)[0] == "converted" and target_name(n) != "_operator.getitem")


@dataclass(frozen=True)
class PartBuild:
    """One engine part built, typed as the engine cache keeps it: its plan, and its profile as the builder
    derived it (None: derive it again). ``files`` / ``from_entry`` are its cache members both ways, as
    ``pipeline.record.Built``'s are for a whole-model build.

    Example:
        >>> PartBuild.from_entry(cache.get(key)).profile["x"]["max"]
        [8, 16]
    """

    plan: bytes
    profile: ProfileRecord | None = None

    def files(self) -> dict[str, bytes]:
        """The part's members for the engine cache."""
        return {"engine": self.plan, "profile.json": json.dumps(self.profile).encode()}

    @classmethod
    def from_entry(cls, entry: Any) -> PartBuild:
        """The part an engine-cache entry holds (``files``' members read back)."""
        return cls(entry.read("engine"), json.loads(entry.read("profile.json")))


#: Builds one engine part: ``(lowered network, the part's config, its name) → PartBuild``. ``build_part`` builds
#: it; ``trtforge.compile`` passes one that asks the engine cache first (``pipeline.partitioned_path``).
PartBuilder = Callable[[Any, CompileConfig, str], PartBuild]


def build_part(net, config: CompileConfig, name: str) -> PartBuild:
    """Build ``net`` (a lowered part) with the one builder and ``config`` (its shapes the part's own)."""
    from trtforge.builder.build import build_network

    built = build_network(net.builder, net.net, net.logger, config, name=name, progress=False)
    return PartBuild(built.plan, built.profiles[0] if built.profiles else None)


def part_config(config: CompileConfig, net, batch) -> CompileConfig:
    """The config one engine part is built with: ``config``, its shapes the part's inputs' over ``batch``."""
    return replace(config, shapes=symbolic_shapes(net, batch), batch=None, batched_inputs=None, progress=False)


def _engine(parent: torch.fx.GraphModule, node: torch.fx.Node, *, batch, config: CompileConfig, runner: Runner,
            builder: PartBuilder | None):
    """Lower one fused submodule and (with a ``builder``) build it with ``config``, its shapes the partition's
    own; its arguments that are the parent's parameters become constants."""
    sub = getattr(parent, node.target)
    placeholders = [n.name for n in sub.graph.find_nodes(op="placeholder")]
    constants = {name: _attr(parent, arg.target) for name, arg in zip(placeholders, node.args, strict=True)
                 if isinstance(arg, torch.fx.Node) and arg.op == "get_attr"}
    lowered = lower_graph(sub.graph, constants, precision=precision_dtype(config.precision),
                          attrs=lambda t: _attr(sub, t), name=node.target)
    net = lowered.net
    built = None if builder is None else builder(net, part_config(config, net, batch), node.target)
    (out,) = sub.graph.find_nodes(op="output")
    values = [n.meta["val"] for n in (out.args[0] if isinstance(out.args[0], (list, tuple)) else [out.args[0]])]
    outputs = [(name, v.dtype, static_shape(v)) for name, v in zip(net.record.outputs, values, strict=True)]
    profile = built.profile if built is not None and built.profile else _profile(net, batch)
    return EngineModule(None if built is None else built.plan, net.record, placeholders, runner, profile, outputs)


def _profile(net, batch) -> dict[str, dict[str, list[int]]]:
    """The engine's one profile as the builder derives it from the inputs' shapes (``symbolic_shapes``)."""
    from trtforge.builder.profiles import resolve_profiles
    from trtforge.core.specs import TensorSpec

    specs = [TensorSpec(name, str(dtype).removeprefix("torch."), tuple(shape))
             for name, dtype, shape in net.record.inputs]
    return resolve_profiles(specs, None, symbolic_shapes(net, batch))[0]


def _attr(module: torch.nn.Module, target: str) -> torch.Tensor:
    for part in target.split("."):
        module = getattr(module, part)
    return module.detach() if isinstance(module, torch.Tensor) else module


#: What ``partition()`` builds when no config is given: FP32 engine parts, no progress bars.
PARTITION_DEFAULTS: dict[str, Any] = {"precision": "fp32", "progress": False}


def partition(model: torch.nn.Module, example_inputs: tuple, config: CompileConfig | None = None, *,
              runner: Runner = reference_runner, build: bool = True, **overrides: Any
              ) -> tuple[torch.nn.Module, PartitionReport]:
    """Export ``model`` and split it: supported runs become ``EngineModule``s, the rest stays PyTorch.

    ``config`` and ``overrides`` are ``CompileConfig``'s (``batch``, ``precision``, ``min_block_size``,
    ``torch_executed_ops``, ``optimization_level``, ...); without a config, FP32 engine parts.
    """
    base = config if config is not None else CompileConfig(**PARTITION_DEFAULTS)
    return partition_module(model, tuple(example_inputs), base.with_overrides(**overrides), runner=runner,
                            builder=build_part if build else None)


def partition_module(model: torch.nn.Module, args: tuple, config: CompileConfig, *,
                     runner: Runner = reference_runner, builder: PartBuilder | None = build_part
                     ) -> tuple[torch.fx.GraphModule, PartitionReport]:
    """The one partitioning code: ``trtforge.compile(path="direct")`` with ``min_block_size`` or
    ``torch_executed_ops`` set, and ``partition()``, run this. ``builder`` builds each engine part (None: the
    parts are lowered, not built)."""
    def export(profiles):
        low, opt, high = export_batch(profiles)
        return export_program(model, args, None if low == high else (low, opt, high))

    program, profiles = at_batch_rule(config, args, export, type(model).__name__)  # the one batch rule
    sizes = export_batch(profiles)
    report = PartitionReport(program=program, min_block_size=config.block_size, precision=config.precision,
                             torch_executed_ops=config.torch_executed_ops,
                             optimization_level=config.optimization_level)
    make = functools.partial(_engine, batch=sizes, config=config, runner=runner, builder=builder)
    return split(program, report, make), report


def fuse(module: torch.fx.GraphModule, precision: str, torch_executed_ops: tuple[str, ...] = ()
         ) -> torch.fx.GraphModule:
    """``module`` with its supported runs fused into ``fused_N`` submodules (the partitioner's proposal; the
    ops ``torch_executed_ops`` names and those with no converter stay outside). ``coverage`` shows these."""
    mark_constants(module.graph, {})
    settings = Settings(compute=precision_dtype(precision))
    partitioner = CapabilityBasedPartitioner(module, _Supported(settings, torch_executed_ops),
                                             allows_single_node_partition=True)
    return partitioner.fuse_partitions(partitioner.propose_partitions())


def blocks(fused: torch.fx.GraphModule) -> list[tuple[torch.fx.Node, torch.fx.GraphModule, int]]:
    """Each fused run of ``fuse(...)``, in graph order: its call node, its graph module and its compute-op count."""
    found = []
    for node in [n for n in fused.graph.nodes if n.op == "call_module"]:
        sub = getattr(fused, node.target)
        if isinstance(sub, torch.fx.GraphModule) and node.target.startswith("fused_"):
            found.append((node, sub, _compute_nodes([n for n in sub.graph.nodes if n.op == "call_function"])))
    return found


def split(program, report: PartitionReport, make: Callable[[torch.fx.GraphModule, torch.fx.Node], EngineModule]
          ) -> torch.fx.GraphModule:
    """Fuse ``program``'s supported runs and turn each of at least ``report.min_block_size`` compute nodes
    into the ``EngineModule`` that ``make(parent, call_node)`` returns; fills ``report``."""
    fused = fuse(program.module(), report.precision, report.torch_executed_ops)
    for node, _sub, count in blocks(fused):
        if count < report.min_block_size:
            report.pytorch[node.target] = f"{count} compute node(s) < min_block_size={report.min_block_size}"
            continue
        try:
            engine = make(fused, node)
        except ConversionRefused as exc:
            report.pytorch[node.target] = str(exc)
            continue
        setattr(fused, node.target, engine)
        report.engines[node.target] = count
    settings = Settings(compute=precision_dtype(report.precision))
    for node in [n for n in fused.graph.nodes if n.op == "call_function"]:  # outside every fused run
        if is_torch_executed(target_name(node), report.torch_executed_ops):
            report.pytorch[node.name] = f"{target_name(node)} is in torch_executed_ops"
        elif target_name(node) != "_operator.getitem" and node_status(node, settings)[0] in ("unsupported", "refused"):
            report.pytorch[node.name] = node_status(node, settings)[1]  # no converter, or its validator's reason
    fused.recompile()
    return fused
