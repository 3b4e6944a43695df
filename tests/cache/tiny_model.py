"""A tiny real network (conv → relu → pool → linear) for fast real builds; also run as a worker script."""

from __future__ import annotations

from pathlib import Path

import torch


class TinyNet(torch.nn.Module):
    """8-channel conv and a 4-way linear head: builds in ~0.1 s with TensorRT-RTX."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.head = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.conv(x)).mean((2, 3)))


EXAMPLE_SHAPE = (1, 3, 16, 16)


def export_tiny(path: Path, seed: int = 0) -> Path:
    """Export TinyNet (weights from ``seed``) to ``path`` with the TorchScript exporter (fast, quiet)."""
    torch.manual_seed(seed)
    model = TinyNet().eval()
    torch.onnx.export(model, (torch.zeros(*EXAMPLE_SHAPE),), str(path), dynamo=False, input_names=["x"],
                      output_names=["y"], dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}}, opset_version=20)
    return path
