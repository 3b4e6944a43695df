"""The ``Engine`` protocol every route implements, and a small base class for the shared parts.

An engine takes tensors (positionally, in ``inputs`` order, or by name) and returns a dict of
named output tensors. Outputs may be views into buffers the engine reuses: they stay valid until
the next call on the same engine; ``clone()`` them to keep them longer. An engine carries the
sidecar it was loaded from (``None`` for a bare ONNX file or module).

Engines that can run inside an outer CUDA graph capture also implement ``CapturableEngine``: the
predictor checks it with ``isinstance`` and then captures preprocessing, the engine and decoding
as one graph.

Example:
    >>> with trtforge.load("out/efficientnet_lite0_fp16.engine", route="fp16") as engine:
    ...     engine.inputs[0].shape
    ...     out = engine(torch.rand(1, 3, 224, 224))
    (-1, 3, 224, 224)
    >>> out["logits"].shape
    torch.Size([1, 1000])
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from trtforge.core.errors import InvalidArgument, Unsupported
from trtforge.core.sidecar import Sidecar
from trtforge.core.specs import TensorSpec

#: One dict per optimization profile: {input name: {"min": [...], "opt": [...], "max": [...]}}.
Profiles = tuple[dict[str, dict[str, list[int]]], ...]


class EngineInputError(InvalidArgument):
    """A call's inputs do not fit the engine (count, name, rank, dtype, device, shape, layout)."""


class EngineClosedError(Unsupported):
    """The engine was closed; load it again."""


@runtime_checkable
class Engine(Protocol):
    """What every route offers: specs, its sidecar, a call, a device, a route name and ``close()``."""

    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    profiles: Profiles
    route: str
    sidecar: Sidecar | None

    @property
    def device(self) -> Any: ...

    def __call__(self, *tensors: Any, **named: Any) -> dict[str, Any]: ...

    def close(self) -> None: ...

    def __enter__(self) -> Engine: ...

    def __exit__(self, *exc: object) -> None: ...


@runtime_checkable
class CapturableEngine(Engine, Protocol):
    """An engine whose forward can run inside an outer CUDA graph capture.

    ``capturable_forward(*tensors)`` takes tensors already in ``compute_format`` on the engine's
    device (in ``inputs`` order), enqueues the model on the current stream with no host
    synchronisation, copy or allocation that would break a capture, and returns the outputs by
    name (buffers the next call overwrites). ``cuda_graph`` says whether the engine was loaded to
    replay graphs itself, which makes the predictor capture by default.

    Example:
        >>> if isinstance(engine, CapturableEngine):
        ...     dtype, channels_last = engine.compute_format
        ...     logits = engine.capturable_forward(x.to(dtype))["logits"]
    """

    cuda_graph: bool

    @property
    def compute_format(self) -> tuple[Any, bool]:
        """(torch dtype, channels_last) of the input ``capturable_forward`` wants."""
        ...

    def capturable_forward(self, *tensors: Any) -> dict[str, Any]: ...


@runtime_checkable
class JoiningEngine(Protocol):
    """An engine that joins a batch's requests for its one input itself (serve's ``FrameEngine``: the frames
    straight into its pinned buffer, one copy); ``join`` returns None where it cannot (the caller then joins).

    Example:
        >>> batch = engine.join(parts, rows) if isinstance(engine, JoiningEngine) else None
    """

    def join(self, parts: Sequence[Any], rows: int) -> Any: ...


# The optional abilities: an engine has one when it has the attribute (``isinstance`` with these protocols);
# callers ask ``isinstance(engine, X)``, never ``getattr(engine, "x", default)``
# (tests/test_architecture.py refuses a getattr/hasattr probe of any name these protocols declare).


@runtime_checkable
class PlacedEngine(Protocol):
    """Something called like an engine that names the device its calls run on (every ``Engine``; serve's batching
    also takes plain callables, which name none).

    Example:
        >>> device = engine.device if isinstance(engine, PlacedEngine) else None
    """

    @property
    def device(self) -> Any: ...


@runtime_checkable
class ProfiledEngine(Protocol):
    """Something called like an engine that has optimization profiles (every ``Engine``, possibly none; serve's
    ``engine_factory`` may return engines that declare none).

    Example:
        >>> profiles = engine.profiles if isinstance(engine, ProfiledEngine) else ()
    """

    profiles: Profiles


@runtime_checkable
class ReplayingEngine(Protocol):
    """An engine that can replay CUDA graphs itself; ``cuda_graph`` says whether this one does (the tensorrt route
    loaded with ``cuda_graph=True``, route ``cuda_graph``, on a GPU). Serve captures such an engine at each bucket.

    Example:
        >>> replays = isinstance(engine, ReplayingEngine) and engine.cuda_graph
    """

    cuda_graph: bool


@runtime_checkable
class PassthroughEngine(Protocol):
    """An engine that takes serve's uint8 frames as they are, without preprocessing, when ``skips_preprocessing``
    (the serving benchmark's null model: the serving path alone).

    Example:
        >>> passthrough = isinstance(engine, PassthroughEngine) and engine.skips_preprocessing
    """

    skips_preprocessing: bool


@runtime_checkable
class RuntimeCachingEngine(Protocol):
    """An engine that loads TensorRT-RTX's runtime cache (JIT kernels kept across processes): the tensorrt route;
    ``runtime_cache_loaded``: whether this load found one.

    Example:
        >>> cached = isinstance(engine, RuntimeCachingEngine) and engine.runtime_cache_loaded
    """

    runtime_cache_loaded: bool


@runtime_checkable
class EmulatingEngine(Protocol):
    """An engine that may run its graph through something other than the graph itself: ``evaluator`` names it
    (the onnxruntime route runs a BF16 graph as its emulation graph), None when it runs the graph as it is.

    Example:
        >>> evaluator = engine.evaluator if isinstance(engine, EmulatingEngine) else None
    """

    evaluator: str | None


@runtime_checkable
class InputMovingEngine(Protocol):
    """An engine that can copy an input on another device to its own on each call (``move_inputs=True`` at load,
    ``runtime.placement``) instead of refusing it; every ``EngineBase``.

    Example:
        >>> moves = isinstance(engine, InputMovingEngine) and engine.move_inputs
    """

    move_inputs: bool


class EngineBase:
    """Shared parts: context manager, closing, and matching call arguments to ``inputs``."""

    route: str = "base"
    inputs: tuple[TensorSpec, ...] = ()
    outputs: tuple[TensorSpec, ...] = ()
    profiles: Profiles = ()
    sidecar: Sidecar | None = None
    #: Move inputs on another device to the engine's (a copy per call) instead of refusing them.
    move_inputs: bool = False
    _closed: bool = False

    def __enter__(self) -> EngineBase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._closed = True

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise EngineClosedError(f"this {self.route} engine was closed; load it again with trtforge.load")

    def recorded_shape_values(self) -> dict[str, tuple[int, ...]]:
        """The values each shape-tensor input was built for, from the sidecar (empty without one).

        Example:
            >>> engine.recorded_shape_values()
            {'shape': (3, 2)}
        """
        records = self.sidecar.shape_inputs if self.sidecar is not None else ()
        return {record.name: record.values for record in records}

    def _arrange(self, tensors: Sequence[Any], named: Mapping[str, Any]) -> list[Any]:
        """Positional and named arguments → one value per input, in ``inputs`` order. A shape-tensor
        input left out gets the values the sidecar records for it (the engine was built for those)."""
        names = [spec.name for spec in self.inputs]
        if len(tensors) > len(names):
            raise EngineInputError(
                f"{len(tensors)} inputs given, the engine takes {len(names)} ({', '.join(names)}); "
                "pass one tensor per input"
            )
        unknown = sorted(set(named) - set(names))
        if unknown:
            raise EngineInputError(
                f"unknown input name(s) {unknown}; the engine's inputs are {names}"
            )
        values: dict[str, Any] = dict(zip(names, tensors, strict=False))
        for key, value in named.items():
            if key in values:
                raise EngineInputError(f"input {key!r} given both by position and by name; give it once")
            values[key] = value
        recorded = self.recorded_shape_values()
        values.update({n: list(recorded[n]) for n in names if n not in values and n in recorded})
        missing = [n for n in names if n not in values]
        if missing:
            raise EngineInputError(f"missing input(s) {missing}; the engine's inputs are {names}")
        return [values[n] for n in names]

    def __repr__(self) -> str:
        ins = ", ".join(f"{s.name}:{s.dtype}{list(s.shape)}" for s in self.inputs)
        return f"<{type(self).__name__} route={self.route} device={getattr(self, 'device', '?')} inputs=[{ins}]>"
