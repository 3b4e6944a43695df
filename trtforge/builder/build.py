"""Parse an ONNX file with TensorRT's parser and build a strongly typed engine plan.

Example:
    >>> result = build_engine(Path("m_fp16.onnx"), CompileConfig(batch="1:8:32"), name="m")
    >>> len(result.plan), result.seconds
"""

from __future__ import annotations

import logging
import re
import signal
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console

from trtforge.builder.native_output import native_output_to_log
from trtforge.builder.portability import apply_portability, builder_record
from trtforge.builder.profiles import resolve_profiles
from trtforge.builder.progress import BuildProgress
from trtforge.builder.timing_cache import TimingCacheSession
from trtforge.core import trt
from trtforge.core.config import CompileConfig
from trtforge.core.errors import Cancelled, InvalidArgument, Unsupported, spelled
from trtforge.core.sidecar import BuilderRecord
from trtforge.core.specs import TensorSpec
from trtforge.core.trt_log import RecordingLogger

log = logging.getLogger(__name__)


#: TensorRT log lines that never explain a refusal: (pattern, why dropped). Data.
UNRELATED_LINES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"cudaError 35|CUDA driver version is insufficient"),
     "a machine without a CUDA driver logs this at builder start; CPU builds do not need one"),
    (re.compile(r"--- (Begin|End) node ---"), "the parser's node frame; the node is named on its own line"),
    (re.compile(r"logger passed into createInferBuilder differs"), "TensorRT keeps one logger per process"),
)


def relevant_lines(message: str) -> list[str]:
    """The non-empty lines of one TensorRT message that are not ``UNRELATED_LINES``."""
    return [line.strip() for line in message.splitlines()
            if line.strip() and not any(p.search(line) for p, _ in UNRELATED_LINES)]


def tensorrt_reasons(messages: list[str], limit: int = 3) -> list[str]:
    """TensorRT's error messages as distinct first relevant lines (unrelated lines dropped), at most ``limit``.

    Example:
        >>> tensorrt_reasons(["Myelin refused X\nTraceback ...", "Myelin refused X\nTraceback ..."])
        ['Myelin refused X']
    """
    reasons: list[str] = []
    for message in messages:
        lines = relevant_lines(message)
        if lines and lines[0] not in reasons:
            reasons.append(lines[0])
    return reasons[:limit]


#: Ops a detector's data-dependent post-processing ends in; a parse refusal of one suggests ``--nms``.
DETECTION_POSTPROCESSING_OPS = frozenset({"NonZero", "NonMaxSuppression"})


class OnnxParseError(InvalidArgument):
    """TensorRT's ONNX parser rejected the graph; ``failures`` lists (node, op, message)."""

    def __init__(self, source: str, failures: list[tuple[str, str, str]]) -> None:
        self.failures = failures
        distinct = list(dict.fromkeys(failures))
        node, op, reason = distinct[0]
        more = f" (and {len(distinct) - 1} more node(s): {', '.join(sorted({f[1] for f in distinct[1:]}))})" \
            if len(distinct) > 1 else ""
        super().__init__(
            f"{trt.info().flavour} cannot parse {source}: node {node!r} ({op}): {reason}{more}; "
            "replace or remove this op before export, or keep it out of the engine: "
            + spelled(cli="--outputs NAME[,NAME]", python="outputs=[NAME, ...]") + " cuts the graph before it"
            + (" and " + spelled(cli="--nms HEAD", python="postprocess=trtforge.NMS(head)") + " appends a "
               "fixed-shape NMS" if op in DETECTION_POSTPROCESSING_OPS else ""))


class ShapeInputError(Unsupported):
    """An input whose values set shapes (a shape tensor): TensorRT needs those values when it builds."""


def shape_input_values(network, path: Path, source: str,
                       values: Mapping[str, Sequence[int]] | None) -> dict[str, list[int]]:
    """The values of every shape-tensor input (an input whose values set shapes), from ``values``.

    TensorRT needs them when it builds (``IOptimizationProfile.set_shape_input``); an input without
    values is refused in one line naming it and the op reading it.

    Example:
        >>> shape_input_values(network, Path("m.onnx"), "m.onnx", {"shape": [3, 2]})
        {'shape': [3, 2]}
    """
    names = [network.get_input(i).name for i in range(network.num_inputs) if network.get_input(i).is_shape_tensor]
    missing = [name for name in names if name not in (values or {})]
    if missing:
        readers = sorted({node.op_type for node in _onnx_nodes(path) if missing[0] in node.input}) or ["?"]
        raise ShapeInputError(
            f"{trt.info().flavour} cannot build {source} as given: input {missing[0]!r} sets shapes in "
            f"{'/'.join(readers)} (a shape tensor), so TensorRT needs its values at build time; pass them in the "
            "example inputs (a dict of arrays with an ONNX file), or make it a constant (an initializer) in the model")
    return {name: [int(v) for v in (values or {})[name]] for name in names}


class BuildFailedError(Unsupported):
    """TensorRT returned no plan; the message carries the builder's distinct error lines."""


class BuildCancelled(Cancelled):
    """The user pressed Ctrl-C during a build, or SIGTERM arrived (``signum``); nothing was written."""

    def __init__(self, message: str, signum: int = signal.SIGINT) -> None:
        super().__init__(message)
        self.signum = signum


@dataclass(frozen=True)
class BuildResult:
    """A serialized plan and what the network looked like when it was built."""

    plan: bytes
    seconds: float
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    profiles: tuple[dict[str, dict[str, list[int]]], ...]
    builder: BuilderRecord = field(default_factory=BuilderRecord)
    warnings: tuple[str, ...] = ()
    #: The values each shape-tensor input was built for (min = opt = max in every profile).
    shape_values: Mapping[str, list[int]] = field(default_factory=dict)


def _spec(tensor) -> TensorSpec:
    return TensorSpec(tensor.name, trt.dtype_name(tensor.dtype), tuple(tensor.shape))


def _parser_reason(err) -> str:
    """The parser's reason: its relevant lines ("Invalid Node - x" then why), or for a bare ``false``
    (a failed check) the error code and the check's name."""
    lines = relevant_lines(err.desc())
    code = getattr(err.code(), "name", str(err.code()))
    if not lines or lines[0].lower() == "false":
        return f"{code} ({err.func()})" if err.func() else code
    reason = ": ".join(lines[:2]) if lines[0].startswith("Invalid Node") else lines[0]
    return f"{code}: {reason[:300]}"


def _onnx_nodes(path: Path) -> list:
    """The graph's nodes (without weights), for naming what TensorRT names only by index or input."""
    import onnx

    try:
        return list(onnx.load(str(path), load_external_data=False).graph.node)
    except (OSError, ValueError):
        return []


def _node_label(nodes: list, err) -> tuple[str, str]:
    """(name, op) of the failing node: its name, else its first output's, else ``#index``; the op from the graph.

    Errors outside a node (index -1) say where in the function name: ``importInput`` (the graph input
    named in ``file()``: its readers' ops) or ``importScatterElements``/``checkDet`` (that op).
    """
    index, func = err.node(), err.func() or ""
    node = nodes[index] if 0 <= index < len(nodes) else None
    if node is None and func == "importInput":
        readers = sorted({n.op_type for n in nodes if err.file() in n.input})
        return f"input {err.file()}", err.node_operator() or "/".join(readers) or "?"
    if node is None:
        op = err.node_operator() or re.sub(r"^(import|check)", "", func)
        matching = [n for n in nodes if n.op_type == op]
        node = matching[0] if len(matching) == 1 else None
    op = err.node_operator() or (node.op_type if node is not None else "?")
    if err.node_name():
        return err.node_name(), op
    if node is None:
        return f"#{index}", op
    position = nodes.index(node)
    return node.name or (f"#{position} -> {node.output[0]}" if node.output else f"#{position}"), op


def parse_network(builder, path: Path, logger: RecordingLogger, source: str | None = None):
    """Create a strongly typed network from ``path``; raise OnnxParseError naming failing nodes.

    ``source`` names the user's model in the message (``path`` may be a temporary file).
    """
    mod = trt.bindings()
    network = builder.create_network(trt.network_flags())
    parser = mod.OnnxParser(network, logger.trt_logger)
    with native_output_to_log():
        ok = parser.parse_from_file(str(path))
    if not ok:
        failures, nodes = [], _onnx_nodes(path)
        for i in range(parser.num_errors):
            err = parser.get_error(i)
            failures.append((*_node_label(nodes, err), _parser_reason(err)))
        reasons = "; ".join(tensorrt_reasons(logger.errors())) or "unknown error"
        raise OnnxParseError(source or str(path), failures or [("?", "?", reasons)])
    return network, parser


#: TensorRT attributes ``parser_refusals`` uses (tests/builder check them against the bindings).
PARSER_API_USED: tuple[str, ...] = (
    "OnnxParser.supports_model_v2", "OnnxParser.num_errors", "OnnxParser.get_error",
    "Builder.create_network",
)


def parser_refusals(model: bytes) -> list[tuple[str, str, str]]:
    """(node name, op type, reason) for each node the installed ONNX parser refuses; no build runs.

    Example:
        >>> parser_refusals(Path("custom.onnx").read_bytes())
        [('my_custom_node', 'FancyUnknownOp', 'creator && "Plugin not found, ..."')]
    """
    mod = trt.bindings()
    logger = RecordingLogger()
    network = mod.Builder(logger.trt_logger).create_network(trt.network_flags())
    parser = mod.OnnxParser(network, logger.trt_logger)
    with native_output_to_log(), logger.active():  # the parser's log lines are its refusals, returned below
        supported = parser.supports_model_v2(model)
    if supported:
        return []
    refused = []
    for i in range(parser.num_errors):
        err = parser.get_error(i)
        refused.append((err.node_name() or f"#{err.node()}", err.node_operator() or "?", err.desc()))
    return refused or [("?", "?", "; ".join(logger.errors()) or "the parser refused the model without a reason")]


def configure(builder, network, config: CompileConfig, monitor: BuildProgress | None,
              shape_values: Mapping[str, list[int]] | None = None):
    """An ``IBuilderConfig`` carrying profiles (with the shape-tensor inputs' values), targets,
    optimisation level and workspace."""
    mod = trt.bindings()
    info = trt.info()
    cfg = builder.create_builder_config()
    cfg.builder_optimization_level = config.optimization_level
    if config.workspace_bytes is not None:
        cfg.set_memory_pool_limit(mod.MemoryPoolType.WORKSPACE, config.workspace_bytes)
    inputs = tuple(_spec(network.get_input(i)) for i in range(network.num_inputs))
    profiles = resolve_profiles(inputs, config.batch, config.shapes_map, config.batched_inputs)
    if shape_values or any(any(d < 0 for d in s.shape) for s in inputs):
        for profile in profiles:
            opt_profile = builder.create_optimization_profile()
            for name, triple in profile.items():
                opt_profile.set_shape(name, triple["min"], triple["opt"], triple["max"])
            for name, values in (shape_values or {}).items():
                opt_profile.set_shape_input(name, values, values, values)
            cfg.add_optimization_profile(opt_profile)
    if config.targets:
        capabilities = [trt.compute_capability(target) for target in config.targets]  # one line if not offered
        if not (hasattr(cfg, "num_compute_capabilities") and hasattr(cfg, "set_compute_capability")):
            raise InvalidArgument(f"targets {list(config.targets)}: {info.flavour} {info.version} builds for no named "
                                  "GPU; omit targets (full TensorRT builds for the GPU it runs on)")
        cfg.num_compute_capabilities = len(capabilities)
        for index, (target, capability) in enumerate(zip(config.targets, capabilities, strict=True)):
            if not cfg.set_compute_capability(capability, index):
                raise BuildFailedError(f"TensorRT refused target {target}")
    apply_portability(cfg, config, mod)
    if monitor is not None and info.progress_monitor:
        cfg.progress_monitor = monitor.trt_monitor()
    return cfg, inputs, profiles


def build_engine(
    onnx_path: Path,
    config: CompileConfig,
    *,
    name: str,
    progress: bool = True,
    console: Console | None = None,
    source: str | None = None,
    input_values: Mapping[str, Sequence[int]] | None = None,
) -> BuildResult:
    """Build ``onnx_path`` into a serialized plan. ``name`` becomes ``network.name`` (determinism).

    ``source`` names the user's model in error messages (default: ``onnx_path``). ``input_values``
    gives the values of inputs TensorRT reads as shape tensors (others are ignored).
    """
    logger = RecordingLogger()
    with logger.active():
        try:
            return _build(Path(onnx_path), config, name, progress, console, source or str(onnx_path), logger,
                          input_values)
        except BaseException as exc:
            # The traceback holds _build's frame and its TensorRT builder; drop them here. Freed later by
            # the garbage collector, inside another build's logger callback, the builder's destructor
            # waits on the lock TensorRT holds while it logs (a deadlock seen in bench/conformance.py).
            raise exc.with_traceback(None)  # noqa: B904 - the same exception, without the frames


def _build(onnx_path: Path, config: CompileConfig, name: str, progress: bool, console: Console | None,
           source: str, logger: RecordingLogger, input_values: Mapping[str, Sequence[int]] | None) -> BuildResult:
    mod = trt.bindings()
    builder = mod.Builder(logger.trt_logger)
    network, _parser = parse_network(builder, onnx_path, logger, source)
    shape_values = shape_input_values(network, onnx_path, source, input_values)
    try:
        return build_network(builder, network, logger, config, name=name, progress=progress, console=console,
                             source=source, shape_values=shape_values)
    except BuildFailedError as exc:
        if not shape_values:
            raise
        nodes = _onnx_nodes(onnx_path)
        built_with = ", ".join(
            f"{name!r} (read by {'/'.join(sorted({n.op_type for n in nodes if name in n.input})) or '?'}) = {values}"
            for name, values in shape_values.items())
        raise BuildFailedError(f"{exc}; built with shape-tensor input values {built_with}") from None


def build_network(builder, network, logger: RecordingLogger, config: CompileConfig, *, name: str,
                  progress: bool = True, console: Console | None = None, source: str | None = None,
                  shape_values: Mapping[str, list[int]] | None = None) -> BuildResult:
    """Build a network already defined on ``builder`` (parsed from ONNX, or converted directly from
    PyTorch by ``trtforge.convert``) with ``config``'s profiles, targets and portability options.

    Example:
        >>> result = build_network(net.builder, net.net, net.logger, CompileConfig(batch="1:8:32"), name="m")
    """
    source = source or name
    network.name = name
    start = time.perf_counter()
    timing = TimingCacheSession(config.timing_cache)
    with BuildProgress(enabled=progress, console=console, title=name) as monitor, timing:
        cfg, inputs, profiles = configure(builder, network, config, monitor, shape_values)
        timing.attach(cfg)
        with native_output_to_log():
            plan = builder.build_serialized_network(network, cfg)
        if plan is not None:
            timing.save()
    seconds = time.perf_counter() - start
    if monitor.cancelled:
        raise BuildCancelled(f"build of {name} cancelled by the user; nothing was written", monitor.signum)
    if plan is None:
        raise BuildFailedError(
            f"{trt.info().flavour} could not build {source}: "
            + ("; ".join(tensorrt_reasons(logger.errors())) or "no error was logged"))
    outputs = tuple(_spec(network.get_output(i)) for i in range(network.num_outputs))
    info = trt.info()
    builder_info = BuilderRecord(
        flavour=info.flavour,
        version=info.version,
        targets=tuple(config.targets) or ("portable",),
        offered_targets=tuple(info.compute_capability_targets),
        optimization_level=config.optimization_level,
        workspace_bytes=config.workspace_bytes,
        strongly_typed=True,
        **builder_record(config),
        timing_cache=timing.active,
        build_seconds=round(seconds, 3),
    )
    return BuildResult(
        plan=bytes(plan), seconds=seconds, inputs=inputs, outputs=outputs, profiles=profiles,
        builder=builder_info, warnings=tuple(m for s, m in logger.messages if s == "WARNING"),
        shape_values=dict(shape_values or {}),
    )
