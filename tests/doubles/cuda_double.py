"""A double of the CUDA runtime's device, stream and graph calls (``FakeCudaDevices``, ``FAKE_CUDA``),
given to the TensorRT route as ``devices=`` (a ``trtforge.runtime.placement.DeviceRuntime``).

It is NOT CUDA: tensors of its GPUs live in host memory. It keeps the current device per thread (as
cudaSetDevice does), streams with handles (0 is each device's legacy default stream, what a thread
runs on until it picks another with ``on_stream``; ``waits`` records every event ordering), and CUDA
graphs: ``capture`` runs the warm-up calls, then records an enqueue on the capturing stream instead
of running it (``tests/doubles/trt_double.py`` asks ``capturing()``); ``replay`` runs it again. The
legacy default stream cannot be captured, as in CUDA.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch


class FakeCudaDevices:
    """The CUDA runtime's device state for ``count`` GPUs: the current device per thread (0 until a
    thread sets another), and every switch made (``switches``). Tensors live in host memory."""

    def __init__(self, count: int = 2) -> None:
        self._count = count
        self._local = threading.local()
        self.switches: list[int] = []
        #: Every stream made, by handle: the device it is on (0 is each device's legacy default stream).
        self.streams: dict[int, FakeStream] = {}
        #: Every event ordering made: (waiting stream handle, waited-for stream handle).
        self.waits: list[tuple[int, int]] = []
        #: Every CUDA graph captured (``capture``), oldest first.
        self.graphs: list[FakeGraph] = []
        self._handles = itertools.count(0x100)

    def count(self) -> int:
        return self._count

    def current(self) -> int:
        return getattr(self._local, "index", 0)

    @contextlib.contextmanager
    def use(self, index: int) -> Iterator[None]:
        """cudaSetDevice(index) for the block, then the previous device again."""
        if not 0 <= index < self._count:
            raise RuntimeError(f"cudaErrorInvalidDevice: device {index} of {self._count}")
        previous = self.current()
        self._local.index = index
        self.switches.append(index)
        try:
            yield
        finally:
            self._local.index = previous

    def memory(self, index: int) -> torch.device:
        return torch.device("cpu")

    def capture(self, fn, index: int, stream: FakeStream, warmup: int) -> tuple[FakeGraph, object]:
        """Run ``fn`` ``warmup`` times on ``stream``, then capture one call: work enqueued on ``stream``
        meanwhile is recorded in the graph, not run (the legacy default stream cannot be captured)."""
        if stream.cuda_stream == 0:
            raise RuntimeError("cudaErrorStreamCaptureUnsupported: the legacy default stream cannot be captured")
        with self.use(index), self.on_stream(stream):
            for _ in range(warmup):
                fn()
            graph = FakeGraph(stream)
            self._local.capturing = graph
            try:
                outputs = fn()
            finally:
                self._local.capturing = None
        self.graphs.append(graph)
        return graph, outputs

    def capturing(self) -> FakeGraph | None:
        """The graph this thread is capturing now, if any."""
        return getattr(self._local, "capturing", None)

    def replay(self, graph: FakeGraph, index: int) -> None:
        with self.use(index):
            for work in graph.work:
                work()
        graph.replays += 1

    def new_stream(self, index: int) -> FakeStream:
        stream = FakeStream(next(self._handles), index, self)
        self.streams[stream.cuda_stream] = stream
        return stream

    def legacy_stream(self, index: int) -> FakeStream:
        """The device's legacy default stream (handle 0), what a thread runs on until it picks another."""
        return FakeStream(0, index, self)

    def current_stream(self, index: int) -> FakeStream:
        return getattr(self._local, "streams", {}).get(index) or self.legacy_stream(index)

    @contextlib.contextmanager
    def on_stream(self, stream: FakeStream) -> Iterator[None]:
        """Make ``stream`` current on its device for the block (as ``torch.cuda.stream``)."""
        streams = self._local.__dict__.setdefault("streams", {})
        previous = streams.get(stream.device)
        streams[stream.device] = stream
        try:
            yield
        finally:
            if previous is None:
                del streams[stream.device]
            else:
                streams[stream.device] = previous


@dataclass
class FakeGraph:
    """A captured CUDA graph: the work enqueued on ``stream`` while it was captured, run again by replays."""

    stream: FakeStream
    work: list = field(default_factory=list)
    replays: int = 0


@dataclass(eq=False)
class FakeStream:
    """A CUDA stream of ``FakeCudaDevices``: ``cuda_stream`` is its handle; ``wait_stream`` records an
    event ordering. Two objects with the same handle are the same stream."""

    cuda_stream: int
    device: int
    devices: FakeCudaDevices

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FakeStream) and (other.cuda_stream, other.device) == (self.cuda_stream, self.device)

    def __hash__(self) -> int:
        return hash((self.cuda_stream, self.device))

    def wait_stream(self, other: FakeStream) -> None:
        self.devices.waits.append((self.cuda_stream, other.cuda_stream))


#: The process's CUDA runtime as the double sees it (two GPUs).
FAKE_CUDA = FakeCudaDevices(2)
