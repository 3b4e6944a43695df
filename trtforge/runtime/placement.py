"""Device placement: which device an engine runs on, what a call does with an input on another device,
and the one switch of the current CUDA device that every route makes before it touches a GPU.

An engine lives on ONE device: its weights, execution contexts, CUDA graphs, streams and staging
buffers are all there (TensorRT binds an engine to the device current when it was deserialized).
The rules for an input of a call, decided by ``placement`` (a pure function, tested over a table):

| input on | engine on | ``move_inputs=False`` (default) | ``move_inputs=True`` |
|---|---|---|---|
| the engine's device | any | used as it is | used as it is |
| the CPU (or numpy) | a GPU | copied to the GPU (staged) | copied to the GPU (staged) |
| another GPU, or a GPU for a CPU engine | | refused: one line naming the fix | moved (a copy per call) |

``move_inputs`` is the one opt-in, given to ``trtforge.load`` (and every route's constructor).

Example:
    >>> placement(torch.device("cuda", 0), torch.device("cuda", 1), move_inputs=False)
    <Placement.REFUSE: 'refuse'>
    >>> resolve_device("cuda", count=2, current=1)
    device(type='cuda', index=1)
"""

from __future__ import annotations

import contextlib
import enum
from typing import Any, Protocol

import torch

from trtforge.core.errors import InvalidArgument
from trtforge.runtime.protocol import EngineInputError


class Placement(enum.Enum):
    """What a call does with one input."""

    USE = "use"        # already on the engine's device: bound as it is
    COPY = "copy"      # host memory to the engine's GPU: the staged copy every route makes
    MOVE = "move"      # another device, and the caller opted in with move_inputs=True
    REFUSE = "refuse"  # another device: InputOnAnotherDevice names the fix


class InputOnAnotherDevice(EngineInputError):
    """An input sits on a device other than the engine's, and the caller did not ask to move it."""


def placement(tensor_device: torch.device, engine_device: torch.device, move_inputs: bool) -> Placement:
    """The rule for an input on ``tensor_device`` given to an engine on ``engine_device``.

    Both devices must carry their index when they are CUDA devices (``resolve_device`` fills it).

    Example:
        >>> placement(torch.device("cpu"), torch.device("cuda", 1), move_inputs=False)
        <Placement.COPY: 'copy'>
    """
    if tensor_device == engine_device:
        return Placement.USE
    if tensor_device.type == "cpu":
        return Placement.COPY
    return Placement.MOVE if move_inputs else Placement.REFUSE


def refusal(name: str, tensor_device: torch.device, engine_device: torch.device) -> InputOnAnotherDevice:
    """The one line for an input on another device: the input, both devices and both fixes."""
    return InputOnAnotherDevice(
        f"input {name!r} is on {tensor_device}; this engine runs on {engine_device}. Move it with "
        f"x.to({str(engine_device)!r}), or load the engine with move_inputs=True to have each call copy it")


def resolve_device(device: str | torch.device | int | None, *, count: int, current: int) -> torch.device:
    """``device`` as asked → the device to use, its index filled, on a machine with ``count`` GPUs.

    ``None`` is the current GPU (``current``) when there is one, else the CPU; ``"cuda"`` is the
    current GPU; an integer ``i`` is ``cuda:i``. A GPU the machine lacks is refused in one line.

    Example:
        >>> resolve_device(None, count=0, current=0)
        device(type='cpu')
    """
    if device is None:
        return torch.device("cuda", current) if count else torch.device("cpu")
    try:
        target = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
    except (RuntimeError, TypeError):
        raise InvalidArgument(f"device={device!r} is not a device; pass 'cpu', 'cuda' or 'cuda:N'") from None
    if target.type != "cuda":
        return target
    if count == 0:
        raise InvalidArgument(f"device {target} asked for, but this machine has no CUDA GPU; use device='cpu'")
    index = current if target.index is None else target.index
    if index >= count:
        raise InvalidArgument(
            f"device cuda:{index} asked for, but this machine has {count} CUDA GPU(s) "
            f"(cuda:0 to cuda:{count - 1}); pass one of those")
    return torch.device("cuda", index)


class DeviceRuntime(Protocol):
    """The CUDA runtime's device calls a route makes: how many GPUs, which is current, and a block
    with another current (cudaGetDeviceCount, cudaGetDevice, cudaSetDevice and back). ``memory``
    is where tensors for a GPU live (host memory for the test double).

    ``capture`` records a call as a CUDA graph on a stream (warm-up calls first), ``replay`` runs it.

    Streams (objects like ``torch.cuda.Stream``: ``cuda_stream`` is the handle, ``wait_stream(other)``
    orders this stream after the work queued on ``other`` so far, through an event): ``new_stream``
    makes one on a GPU, ``current_stream`` is the calling thread's current one there (the legacy
    default stream, handle 0, unless the caller chose another), ``on_stream`` makes a stream current
    for a block."""

    def count(self) -> int: ...

    def current(self) -> int: ...

    def use(self, index: int) -> contextlib.AbstractContextManager: ...

    def memory(self, index: int) -> torch.device: ...

    def new_stream(self, index: int) -> Any: ...

    def current_stream(self, index: int) -> Any: ...

    def on_stream(self, stream: Any) -> contextlib.AbstractContextManager: ...

    def capture(self, fn: Any, index: int, stream: Any, warmup: int) -> tuple[Any, Any]: ...

    def replay(self, graph: Any, index: int) -> None: ...


class TorchCuda:
    """``DeviceRuntime`` through torch.cuda. ``torch.cuda.device`` restores the previous device only
    where it already has a context, so switching to cuda:1 creates none on cuda:0."""

    def count(self) -> int:
        return torch.cuda.device_count() if torch.cuda.is_available() else 0

    def current(self) -> int:
        return torch.cuda.current_device()

    def use(self, index: int) -> contextlib.AbstractContextManager:
        return torch.cuda.device(index)

    def memory(self, index: int) -> torch.device:
        return torch.device("cuda", index)

    def new_stream(self, index: int) -> torch.cuda.Stream:
        return torch.cuda.Stream(torch.device("cuda", index))

    def current_stream(self, index: int) -> torch.cuda.Stream:
        return torch.cuda.current_stream(torch.device("cuda", index))

    def on_stream(self, stream: torch.cuda.Stream) -> contextlib.AbstractContextManager:
        return torch.cuda.stream(stream)

    def capture(self, fn: Any, index: int, stream: torch.cuda.Stream, warmup: int) -> tuple[Any, Any]:
        """Run ``fn`` ``warmup`` times on ``stream`` (lazy init, autotuning), then capture one call there:
        (the ``torch.cuda.CUDAGraph``, what the captured call returned)."""
        with self.use(index):
            caller = torch.cuda.current_stream(index)
            stream.wait_stream(caller)
            with torch.cuda.stream(stream):
                for _ in range(warmup):
                    fn()
            caller.wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            # thread_local: a capture forbids unsafe CUDA calls (cudaMalloc, a synchronize) in this thread
            # only. The default, global, forbids them in every thread of the process, so an engine on
            # another GPU, run from its own thread, would fail while this one captures.
            with torch.cuda.graph(graph, stream=stream, capture_error_mode="thread_local"):
                outputs = fn()
            caller.wait_stream(stream)
        return graph, outputs

    def replay(self, graph: Any, index: int) -> None:
        """Replay ``graph`` on the current stream of GPU ``index``."""
        with self.use(index):
            graph.replay()


TORCH_CUDA = TorchCuda()


def default_device(device: str | torch.device | int | None, devices: DeviceRuntime = TORCH_CUDA) -> torch.device:
    """``device`` on this machine (see ``resolve_device``); ``None`` → the current GPU, else the CPU.

    Example:
        >>> default_device("cpu")
        device(type='cpu')
    """
    count = devices.count()
    asks_current = device is None or (isinstance(device, (str, torch.device)) and str(device) == "cuda")
    return resolve_device(device, count=count, current=devices.current() if count and asks_current else 0)


def on_device(device: torch.device) -> contextlib.AbstractContextManager:
    """Make ``device`` the current CUDA device for the block (nothing for a CPU device).

    Example:
        >>> with on_device(torch.device("cuda", 1)):
        ...     pinned = torch.empty(8, pin_memory=True)   # any context it needs is cuda:1's
    """
    return TORCH_CUDA.use(device.index) if device.type == "cuda" else contextlib.nullcontext()
