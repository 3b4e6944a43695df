"""uint8 frames in, trtforge's one preprocessing inside the server: ``input_format="uint8"``.

An image model whose sidecar has a ``preprocessing`` record can take (H, W, 3) uint8 RGB frames of
the record's size instead of its float input: 4x fewer bytes per request (1 instead of 4 per value),
and the transform (channel order, scale, mean, std, layout) runs where the engine runs, through the
vision predictor's one ``Preprocessor`` (``trtforge.core.preprocessing``'s transform).

On an engine that replays CUDA graphs (route ``cuda_graph``; ``tensorrt`` with ``cuda_graph``), one
graph per batch size holds everything after the host copy: the DMA of the frames from the
Preprocessor's pinned buffer, the preprocessing (written straight in the model's compute format),
the model, and one copy of every output into pinned host memory. The batcher joins the requests'
frames straight into that pinned buffer (``join``), so a batch costs one host copy, one replay and
one synchronize; frames that arrive on the GPU (Triton GPU tensors) are copied into the graph's
input on the device.

Example:
    >>> frame_specs(read_sidecar("lite0.json"))
    (TensorSpec(name='images', dtype='uint8', shape=(-1, 224, 224, 3)),)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trtforge.core.errors import InvalidArgument
from trtforge.core.sidecar import Sidecar
from trtforge.core.specs import TensorSpec

#: ``native``: the model's own inputs; ``uint8``: HWC uint8 frames, preprocessed in the server.
INPUT_FORMATS: tuple[str, ...] = ("native", "uint8")


def check_input_format(name: str) -> str:
    """``name`` if it is a known input format, else one line naming the choices."""
    if name not in INPUT_FORMATS:
        raise InvalidArgument(f"input format {name!r} is not one of {INPUT_FORMATS}")
    return name


def frame_specs(sidecar: Sidecar) -> tuple[TensorSpec, ...]:
    """The uint8 frame input that replaces the model's one image input (batch axis kept as it is)."""
    if sidecar.preprocessing is None:
        raise InvalidArgument(f"{sidecar.path}: input format uint8 needs the sidecar's preprocessing record "
                              "(build with --preprocessing, or serve the native input format)")
    if len(sidecar.inputs) != 1:
        raise InvalidArgument(f"{sidecar.path}: input format uint8 takes a model with one image input; this one "
                              f"has {[s.name for s in sidecar.inputs]}")
    spec = sidecar.inputs[0]
    height, width = sidecar.preprocessing.size
    batch = spec.shape[0] if spec.shape else 1
    return (TensorSpec(spec.name, "uint8", (batch, height, width, 3)),)


class FrameEngine:
    """An engine that takes (B, H, W, 3) uint8 frames: ``Preprocessor`` on the engine's device, then the engine.

    A ``PassthroughEngine`` with ``skips_preprocessing = True`` (the benchmark's null model) gets the frames as
    they are: it measures the serving path alone. Outputs come back as NumPy arrays (views of
    pinned bytes on the graph path, valid until the next call).
    """

    def __init__(self, engine: Any, sidecar: Sidecar) -> None:
        import torch

        from trtforge.runtime.cuda_graph import GraphCache
        from trtforge.runtime.protocol import CapturableEngine, PassthroughEngine, ReplayingEngine
        from trtforge.runtime.tensors import torch_dtype
        from trtforge.vision.preprocess import Preprocessor

        self.engine, self.inputs, self.outputs = engine, frame_specs(sidecar), engine.outputs
        self.route, self.profiles = engine.route, ()
        self.cuda_graph = isinstance(engine, ReplayingEngine) and bool(engine.cuda_graph)
        self.passthrough = isinstance(engine, PassthroughEngine) and bool(engine.skips_preprocessing)
        device = torch.device(engine.device)
        self.preprocessor = None if self.passthrough else Preprocessor(
            sidecar.preprocessing, device, torch_dtype(engine.inputs[0].dtype))
        capturable = isinstance(engine, CapturableEngine) and not self.passthrough
        # (dtype, channels_last) the model computes in: the transform writes it, no second conversion.
        self._format = engine.compute_format if capturable else (None, False)
        self._capturable = capturable
        self._graphs = GraphCache(device) if capturable and self.cuda_graph and device.type == "cuda" else None
        self._statics: dict[int, Any] = {}
        self._host: dict[tuple, tuple[Any, Any]] = {}

    @property
    def device(self) -> str:
        return self.engine.device

    def join(self, parts: Sequence[Any], rows: int) -> Any:
        """The requests' frames as one (rows, H, W, 3) batch, zero padded: host frames are copied once,
        straight into the Preprocessor's pinned buffer (the call then uploads it without a copy)."""
        import numpy as np

        if self.preprocessor is None or not all(isinstance(p, np.ndarray) for p in parts):
            return None
        from trtforge.runtime.staging import copy_rows

        host = self.preprocessor.staged((rows, *parts[0].shape[1:])).numpy()
        copy_rows(host, parts)
        return host

    def upload(self, frames: Any) -> Any:
        """(B, H, W, 3) uint8 frames → a tensor on the engine's device (host frames through the
        Preprocessor's grow-only pinned buffer, then one non-blocking copy)."""
        import torch

        pre = self.preprocessor
        if isinstance(frames, torch.Tensor) and frames.device.type != "cpu":
            return frames
        if pre.device.type != "cuda":
            return torch.as_tensor(frames)
        return pre.stage(frames).to(pre.device, non_blocking=True)

    def __call__(self, frames: Any) -> Any:
        if self.preprocessor is None:
            return self.engine(frames)
        if self._graphs is not None:
            return self._graph_call(frames)
        u8 = self.upload(frames)
        if self._capturable:
            return self.engine.capturable_forward(self.preprocessor.transform(u8, *self._format))
        return self.engine(self.preprocessor.transform(u8))

    def _graph_call(self, frames: Any) -> dict[str, Any]:
        """One replay: frames → (DMA) → preprocessing → model → every output into pinned host bytes."""
        import torch

        from trtforge.runtime.placement import on_device

        rows, pre = len(frames), self.preprocessor
        with on_device(pre.device):
            static = self._statics.get(rows)
            if static is None:  # the graphs read it: it lives as long as they do
                static = self._statics[rows] = torch.empty((rows, *frames.shape[1:]), dtype=torch.uint8,
                                                           device=pre.device)
            staging = None
            if isinstance(frames, torch.Tensor) and frames.device.type != "cpu":
                static.copy_(frames)
                key: tuple = (rows, "device")
            else:
                staging = pre.stage(frames)  # no copy when the batcher joined into it
                key = (rows, staging.data_ptr())
            host = self._graphs.replay(key, lambda: self._step(key, static, staging))
            torch.cuda.current_stream(pre.device).synchronize()
        layout = self._host[key][0]
        arrays = layout.unpack(host.numpy())
        return {spec.name: a for spec, a in zip(self.outputs, arrays, strict=True)}

    def _step(self, key: tuple, static: Any, staging: Any) -> Any:
        import torch

        from trtforge.vision.packing import PackedLayout

        if staging is not None:
            static.copy_(staging, non_blocking=True)
        outputs = self.engine.capturable_forward(self.preprocessor.transform(static, *self._format))
        tensors = [outputs[spec.name] for spec in self.outputs]
        if key not in self._host:  # the warm-up runs come before the capture: pinned bytes allocated here
            layout = PackedLayout.of(tensors)
            self._host[key] = (layout, torch.empty(layout.nbytes, dtype=torch.uint8, pin_memory=True))
        layout, host = self._host[key]
        return host.copy_(layout.pack(tensors), non_blocking=True)

    def close(self) -> None:
        if self._graphs is not None:
            self._graphs.clear()
        self._statics.clear()
        self._host.clear()
        self.engine.close()
