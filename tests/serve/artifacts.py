"""Small artifacts for the serving tests: a linear model exported to ONNX, with a sidecar.

The engine file is a placeholder (no engine runs on this CPU machine); the routes served here
(``onnxruntime``, ``eager``) run the ONNX graph or the PyTorch model. ``scale`` tells versions
apart by their output: y = x @ W * scale.
"""

from __future__ import annotations

from pathlib import Path

import torch

from trtforge.core.hashing import sha256_file
from trtforge.core.sidecar import Sidecar, write_sidecar
from trtforge.core.specs import TensorSpec

FEATURES, OUT = 4, 3
WEIGHT = torch.arange(FEATURES * OUT, dtype=torch.float32).reshape(OUT, FEATURES) / 10


class Scaled(torch.nn.Module):
    def __init__(self, scale: float) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(FEATURES, OUT, bias=False)
        with torch.no_grad():
            self.linear.weight.copy_(WEIGHT * scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)


def expected(x, scale: float):
    return (torch.as_tensor(x) @ (WEIGHT * scale).T).numpy()


def make_artifact(folder: Path, scale: float = 1.0, name: str = "linear", max_batch: int = 16,
                  targets: tuple[str, ...] = ()) -> Path:
    """Write ``folder/<name>.json`` (+ .onnx, placeholder .engine); returns the sidecar path."""
    folder.mkdir(parents=True, exist_ok=True)
    onnx_path = folder / f"{name}.onnx"
    torch.onnx.export(Scaled(scale).eval(), (torch.zeros(1, FEATURES),), str(onnx_path), dynamo=False,
                      input_names=["x"], output_names=["y"], dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
    engine = folder / f"{name}.engine"
    engine.write_bytes(f"placeholder engine, scale {scale}, targets {targets}".encode())
    sidecar = Sidecar(
        name=name, engine_file=engine.name, engine_size=engine.stat().st_size, engine_sha256=sha256_file(engine),
        inputs=(TensorSpec("x", "float32", (-1, FEATURES)),), outputs=(TensorSpec("y", "float32", (-1, OUT)),),
        profiles=({"x": {"min": [1, FEATURES], "opt": [4, FEATURES], "max": [max_batch, FEATURES]}},),
        precision={"built": "fp32"}, builder={"flavour": "tensorrt_rtx", "targets": list(targets) or ["portable"]},
        source={"kind": "onnx", "onnx_file": onnx_path.name, "reference_onnx_file": onnx_path.name,
                "onnx_sha256": sha256_file(onnx_path), "reference_onnx_sha256": sha256_file(onnx_path)},
    )
    return write_sidecar(folder / f"{name}.json", sidecar)


class TinyConv(torch.nn.Module):
    """(N, 3, 8, 8) float → (N, 2): a conv, a pooled mean and a linear layer, fixed weights."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.head = torch.nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.conv(x).mean(dim=(2, 3)))


#: The image artifact's preprocessing: BGR, ImageNet-like mean and std (what a uint8 frame turns into).
IMAGE_PREPROCESSING = {"resize": [8, 8], "mean": [0.4, 0.5, 0.6], "std": [0.2, 0.25, 0.3], "channel_order": "BGR"}


def make_image_artifact(folder: Path, name: str = "tinyconv", max_batch: int = 8) -> Path:
    """An image model's artifact with a preprocessing record (served with ``input_format="uint8"``)."""
    folder.mkdir(parents=True, exist_ok=True)
    onnx_path = folder / f"{name}.onnx"
    torch.onnx.export(TinyConv().eval(), (torch.zeros(1, 3, 8, 8),), str(onnx_path), dynamo=False,
                      input_names=["image"], output_names=["logits"],
                      dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}})
    engine = folder / f"{name}.engine"
    engine.write_bytes(b"placeholder engine of the tiny conv model")
    sidecar = Sidecar(
        name=name, engine_file=engine.name, engine_size=engine.stat().st_size, engine_sha256=sha256_file(engine),
        inputs=(TensorSpec("image", "float32", (-1, 3, 8, 8)),), outputs=(TensorSpec("logits", "float32", (-1, 2)),),
        profiles=({"image": {"min": [1, 3, 8, 8], "opt": [4, 3, 8, 8], "max": [max_batch, 3, 8, 8]}},),
        precision={"built": "fp32"}, builder={"flavour": "tensorrt_rtx", "targets": ["portable"]},
        source={"kind": "onnx", "onnx_file": onnx_path.name, "reference_onnx_file": onnx_path.name,
                "onnx_sha256": sha256_file(onnx_path), "reference_onnx_sha256": sha256_file(onnx_path)},
        preprocessing=IMAGE_PREPROCESSING,
    )
    return write_sidecar(folder / f"{name}.json", sidecar)
