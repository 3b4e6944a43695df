"""An engine double for health checks: a real ONNX Runtime engine that fails on command.

``engine_factory="tests.serve.doubles:failing_on_command"`` makes the served model load this. It
runs the artifact's ONNX graph (real answers) under the route name it was asked for; while a file
``FAIL-<route>`` exists beside the sidecar, every call raises, as a broken GPU route would.
"""

from __future__ import annotations

from pathlib import Path

from trtforge.runtime.load import load
from trtforge.runtime.protocol import EngineBase


class FailingOnCommand(EngineBase):
    def __init__(self, sidecar: Path, route: str) -> None:
        self._engine = load(sidecar, route="onnxruntime")
        self.inputs, self.outputs, self.profiles = self._engine.inputs, self._engine.outputs, self._engine.profiles
        self.route = route
        self.flag = Path(sidecar).parent / f"FAIL-{route}"

    @property
    def device(self):
        return self._engine.device

    def __call__(self, *tensors, **named):
        if self.flag.exists():
            raise RuntimeError(f"{self.route} engine failing on command ({self.flag.name} exists)")
        return self._engine(*tensors, **named)

    def close(self) -> None:
        self._engine.close()
        super().close()


def failing_on_command(sidecar: Path, route: str) -> FailingOnCommand:
    return FailingOnCommand(sidecar, route)


class RecordingGraphEngine(FailingOnCommand):
    """Says it replays CUDA graphs (``cuda_graph = True``) and appends each call's batch size to
    ``batch-sizes.txt`` beside the sidecar: what the server calls a graph engine with."""

    cuda_graph = True

    def __call__(self, *tensors, **named):
        with open(Path(self.flag).parent / "batch-sizes.txt", "a") as log:
            log.write(f"{len(tensors[0])}\n")
        return super().__call__(*tensors, **named)


def recording_graph_engine(sidecar: Path, route: str) -> RecordingGraphEngine:
    return RecordingGraphEngine(sidecar, route)


class SlowRecording(FailingOnCommand):
    """Each call of the primary route takes ``DELAY_S`` and appends ``start end thread-name thread-id`` to
    ``calls.txt`` beside the sidecar (the fallback route answers at once): overlapping calls, and how
    many health-check threads ran, can be read back."""

    DELAY_S = 0.15

    def __call__(self, *tensors, **named):
        import threading
        import time

        if self.route == "onnxruntime":
            return super().__call__(*tensors, **named)
        start = time.monotonic()
        time.sleep(self.DELAY_S)
        result = super().__call__(*tensors, **named)
        thread = threading.current_thread()
        with open(Path(self.flag).parent / "calls.txt", "a") as log:
            log.write(f"{start} {time.monotonic()} {thread.name} {thread.ident}\n")
        return result


def slow_recording(sidecar: Path, route: str) -> SlowRecording:
    return SlowRecording(sidecar, route)


def refusing_to_load(sidecar: Path, route: str):
    raise RuntimeError(f"route {route} cannot run on this test machine (a double that refuses to load)")
