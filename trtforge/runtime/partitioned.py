"""The TensorRT runner of a partitioned module: each engine part runs through the TensorRT route.

A partitioned module (``trtforge.convert.partition``, saved by ``trtforge.convert.saved``) calls its
runner with the engine part and its inputs by name. This runner opens each part's engine file with
``TensorRTEngine`` (through its sidecar: sha256 checked, host code refused) when the module is
loaded, runs it on the engine's GPU, and hands the outputs back on the device of the part's first
input, so the PyTorch parts between engines see their tensors where the caller put them. The CPU
fallback, the reference evaluator, stays in ``trtforge.convert.partition`` (``ReferenceRunner``).

The runtime knows nothing of how the parts were made: a part is anything with ``sidecar_path`` and
``record.outputs`` (the names of its outputs, in order).

Example:
    >>> art = trtforge.compile(model, (x,), path="direct", min_block_size=3)
    >>> module = art.load(route="tensorrt", device="cuda:0")   # builds TensorRTRunner
    >>> module.trtforge_route
    'tensorrt'
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import torch

from trtforge.core import trt as trt_shim
from trtforge.core.errors import InvalidArgument
from trtforge.runtime.tensorrt_route import TensorRTEngine


class EnginePart(Protocol):
    """What the runner reads of an engine part (``trtforge.convert.partition.EngineModule``)."""

    sidecar_path: Path | None
    record: Any


def tensorrt_can_run() -> bool:
    """Whether this machine can run engines on the TensorRT route: a CUDA GPU and TensorRT bindings."""
    return torch.cuda.is_available() and trt_shim.available()


class TensorRTRunner:
    """Runs engine parts through ``TensorRTEngine``; ``options`` go to it (``bindings=``, ``devices=``,
    ``cuda_graph=``, ``allow_host_code=``, ...)."""

    route = TensorRTEngine.route

    def __init__(self, device: Any = None, **options: Any) -> None:
        self.device, self.options = device, options
        self._engines: dict[int, TensorRTEngine] = {}

    def open(self, part: EnginePart, name: str = "engine part") -> TensorRTEngine:
        """The part's engine, deserialized once (errors here, at load, not at the first call)."""
        engine = self._engines.get(id(part))
        if engine is None:
            if part.sidecar_path is None:
                raise InvalidArgument(f"{name} has no built engine (it was partitioned with build=False); partition "
                                      "it again with build=True, or load it with route='evaluator'")
            engine = self._engines[id(part)] = TensorRTEngine(part.sidecar_path, device=self.device, **self.options)
        return engine

    def __call__(self, part: EnginePart, feeds: dict[str, torch.Tensor]) -> list[torch.Tensor]:
        engine = self.open(part)
        result = engine(**feeds)
        where = next(iter(feeds.values())).device if feeds else torch.device("cpu")
        # The route's outputs are views of its buffers, valid until its next call: copied out here.
        return [result[name].to(where, copy=True) for name in part.record.outputs]

    def close(self) -> None:
        for engine in self._engines.values():
            engine.close()
        self._engines.clear()
