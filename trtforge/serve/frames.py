"""uint8 frames in, trtforge's one preprocessing inside the server: ``input_format="uint8"``.

An image model whose sidecar has a ``preprocessing`` record can take (H, W, 3) uint8 RGB frames of
the record's size instead of its float input: 4x fewer bytes per request (1 instead of 4 per value),
and the resize-free part of the transform (channel order, scale, mean, std, layout) runs where the
engine runs, through the vision predictor's ``Preprocessor.transform`` (``trtforge.core.preprocessing``'s
transform, on the GPU for the GPU routes).

Example:
    >>> frame_specs(read_sidecar("lite0.json"))
    (TensorSpec(name='images', dtype='uint8', shape=(-1, 224, 224, 3)),)
"""

from __future__ import annotations

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

    An engine with ``skips_preprocessing = True`` (the benchmark's null model) gets the frames as
    they are: it measures the serving path alone.
    """

    def __init__(self, engine: Any, sidecar: Sidecar) -> None:
        import torch

        from trtforge.runtime.tensors import torch_dtype
        from trtforge.vision.preprocess import Preprocessor

        self.engine, self.inputs, self.outputs = engine, frame_specs(sidecar), engine.outputs
        self.route, self.profiles, self.cuda_graph = engine.route, (), bool(getattr(engine, "cuda_graph", False))
        self.passthrough = bool(getattr(engine, "skips_preprocessing", False))
        dtype = torch_dtype(engine.inputs[0].dtype)
        self.preprocessor = None if self.passthrough else Preprocessor(sidecar.preprocessing,
                                                                      torch.device(engine.device), dtype)
        self._pinned: Any = None

    @property
    def device(self) -> str:
        return self.engine.device

    def upload(self, frames: Any) -> Any:
        """(B, H, W, 3) uint8 host frames → a tensor on the engine's device: on a GPU, through one pinned
        buffer that only grows (the batcher's sizes vary; re-pinning per size would cost more than the
        copy), then one non-blocking copy. The caller reads the outputs back before the next call."""
        import torch

        from trtforge.runtime.placement import on_device

        host = torch.from_numpy(frames) if not isinstance(frames, torch.Tensor) else frames
        device = self.preprocessor.device
        if device.type != "cuda":
            return host.to(device)
        if self._pinned is None or self._pinned.shape[0] < len(host) or self._pinned.shape[1:] != host.shape[1:]:
            with on_device(device):  # pinning needs a CUDA context: the instance's GPU's, never GPU 0's
                self._pinned = torch.empty(host.shape, dtype=torch.uint8, pin_memory=True)
        staged = self._pinned[:len(host)]
        staged.copy_(host)
        return staged.to(device, non_blocking=True)

    def __call__(self, frames: Any) -> Any:
        if self.preprocessor is None:
            return self.engine(frames)
        return self.engine(self.preprocessor.transform(self.upload(frames)))

    def close(self) -> None:
        self.engine.close()
