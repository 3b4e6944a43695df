"""Parse an ONNX file with TensorRT's parser and build a strongly typed engine plan.

Example:
    >>> result = build_engine(Path("m_fp16.onnx"), CompileConfig(batch="1:8:32"), name="m")
    >>> len(result.plan), result.seconds
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console

from trtforge.builder.portability import apply_portability, builder_record
from trtforge.builder.profiles import resolve_profiles
from trtforge.builder.progress import BuildProgress
from trtforge.builder.timing_cache import TimingCacheSession
from trtforge.core import trt
from trtforge.core.config import CompileConfig
from trtforge.core.errors import Cancelled, InvalidArgument, Unsupported
from trtforge.core.specs import TensorSpec

log = logging.getLogger(__name__)

#: TensorRT DataType names → numpy-style names used in specs.

class OnnxParseError(InvalidArgument):
    """TensorRT's ONNX parser rejected the graph; ``failures`` lists (node, op, message)."""

    def __init__(self, path: Path, failures: list[tuple[str, str, str]]) -> None:
        self.failures = failures
        lines = [f"  node {node!r} ({op}): {msg}" for node, op, msg in failures]
        super().__init__(
            f"TensorRT's ONNX parser rejected {path}:\n" + "\n".join(lines)
            + "\nReplace or remove these ops before export, or keep them out of the engine."
        )


class BuildFailedError(Unsupported):
    """TensorRT returned no plan; the message carries the builder's error log."""


class BuildCancelled(Cancelled):
    """The user pressed Ctrl-C during a build; nothing was written."""


class RecordingLogger:
    """A TensorRT logger that keeps warnings and errors and forwards them to ``logging``."""

    def __init__(self) -> None:
        mod = trt.bindings()
        owner = self
        self.messages: list[tuple[str, str]] = []

        class _Logger(mod.ILogger):
            def __init__(self) -> None:
                mod.ILogger.__init__(self)

            def log(self, severity, msg):
                owner.record(severity.name if hasattr(severity, "name") else str(severity), msg)

        self.trt_logger = _Logger()

    def record(self, severity: str, msg: str) -> None:
        if severity in ("INTERNAL_ERROR", "ERROR"):
            self.messages.append((severity, msg))
            log.debug("TensorRT %s: %s", severity, msg)
        elif severity == "WARNING":
            self.messages.append((severity, msg))
            log.debug("TensorRT warning: %s", msg)

    def errors(self) -> list[str]:
        return [m for s, m in self.messages if s in ("INTERNAL_ERROR", "ERROR")]


@dataclass(frozen=True)
class BuildResult:
    """A serialized plan and what the network looked like when it was built."""

    plan: bytes
    seconds: float
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    profiles: tuple[dict[str, dict[str, list[int]]], ...]
    builder: dict = field(default_factory=dict)
    warnings: tuple[str, ...] = ()


def _spec(tensor) -> TensorSpec:
    return TensorSpec(tensor.name, trt.dtype_name(tensor.dtype), tuple(tensor.shape))


def parse_network(builder, path: Path, logger: RecordingLogger):
    """Create a strongly typed network from ``path``; raise OnnxParseError naming failing nodes."""
    mod = trt.bindings()
    network = builder.create_network(trt.network_flags())
    parser = mod.OnnxParser(network, logger.trt_logger)
    ok = parser.parse_from_file(str(path))
    if not ok:
        failures = []
        for i in range(parser.num_errors):
            err = parser.get_error(i)
            failures.append((err.node_name() or f"#{err.node()}", err.node_operator() or "?", err.desc()))
        raise OnnxParseError(path, failures or [("?", "?", "; ".join(logger.errors()) or "unknown error")])
    return network, parser


def configure(builder, network, config: CompileConfig, monitor: BuildProgress | None):
    """An ``IBuilderConfig`` carrying profiles, targets, optimisation level and workspace."""
    mod = trt.bindings()
    info = trt.info()
    cfg = builder.create_builder_config()
    cfg.builder_optimization_level = config.optimization_level
    if config.workspace_bytes is not None:
        cfg.set_memory_pool_limit(mod.MemoryPoolType.WORKSPACE, config.workspace_bytes)
    inputs = tuple(_spec(network.get_input(i)) for i in range(network.num_inputs))
    profiles = resolve_profiles(inputs, config.batch, config.shapes_map)
    if any(any(d < 0 for d in s.shape) for s in inputs):
        for profile in profiles:
            opt_profile = builder.create_optimization_profile()
            for name, triple in profile.items():
                opt_profile.set_shape(name, triple["min"], triple["opt"], triple["max"])
            cfg.add_optimization_profile(opt_profile)
    if config.targets:
        cfg.num_compute_capabilities = len(config.targets)
        for index, target in enumerate(config.targets):
            if not cfg.set_compute_capability(trt.compute_capability(target), index):
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
) -> BuildResult:
    """Build ``onnx_path`` into a serialized plan. ``name`` becomes ``network.name`` (determinism)."""
    mod = trt.bindings()
    logger = RecordingLogger()
    builder = mod.Builder(logger.trt_logger)
    network, _parser = parse_network(builder, Path(onnx_path), logger)
    return build_network(builder, network, logger, config, name=name, progress=progress, console=console)


def build_network(builder, network, logger: RecordingLogger, config: CompileConfig, *, name: str,
                  progress: bool = True, console: Console | None = None) -> BuildResult:
    """Build a network already defined on ``builder`` (parsed from ONNX, or converted directly from
    PyTorch by ``trtforge.convert``) with ``config``'s profiles, targets and portability options.

    Example:
        >>> result = build_network(net.builder, net.net, net.logger, CompileConfig(batch="1:8:32"), name="m")
    """
    network.name = name
    start = time.perf_counter()
    timing = TimingCacheSession(config.timing_cache)
    with BuildProgress(enabled=progress, console=console, title=name) as monitor, timing:
        cfg, inputs, profiles = configure(builder, network, config, monitor)
        timing.attach(cfg)
        plan = builder.build_serialized_network(network, cfg)
        if plan is not None:
            timing.save()
    seconds = time.perf_counter() - start
    if monitor.cancelled:
        raise BuildCancelled(f"build of {name} cancelled by the user; nothing was written")
    if plan is None:
        raise BuildFailedError(
            f"TensorRT could not build {name}: " + ("; ".join(logger.errors()) or "no error was logged")
        )
    outputs = tuple(_spec(network.get_output(i)) for i in range(network.num_outputs))
    info = trt.info()
    builder_info = {
        "flavour": info.flavour,
        "version": info.version,
        "targets": list(config.targets) or ["portable"],
        "offered_targets": list(info.compute_capability_targets),
        "optimization_level": config.optimization_level,
        "workspace_bytes": config.workspace_bytes,
        "strongly_typed": True,
        **builder_record(config),
        "timing_cache": timing.active,
        "build_seconds": round(seconds, 3),
    }
    return BuildResult(
        plan=bytes(plan), seconds=seconds, inputs=inputs, outputs=outputs, profiles=profiles,
        builder=builder_info, warnings=tuple(m for s, m in logger.messages if s == "WARNING"),
    )
