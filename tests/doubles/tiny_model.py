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


class QuantNet(torch.nn.Module):
    """conv (3 → 32) → depthwise conv → linear → linear head: every case of the INT8 placement rules."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 32, 3, padding=1)
        self.dw = torch.nn.Conv2d(32, 32, 3, padding=1, groups=32)
        self.fc = torch.nn.Linear(32, 16)
        self.head = torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.dw(torch.relu(self.stem(x)))).mean((2, 3))
        return self.head(torch.relu(self.fc(x)))


EXAMPLE_SHAPE = (1, 3, 16, 16)


def export_tiny(path: Path, seed: int = 0) -> Path:
    """Export TinyNet (weights from ``seed``) to ``path`` with the TorchScript exporter (fast, quiet)."""
    torch.manual_seed(seed)
    model = TinyNet().eval()
    torch.onnx.export(model, (torch.zeros(*EXAMPLE_SHAPE),), str(path), dynamo=False, input_names=["x"],
                      output_names=["y"], dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}}, opset_version=20)
    return path


def _worker(cache_dir: str, output_dir: str, start_at: float) -> None:
    """Compile TinyNet (seed 0) once ``start_at`` arrives; print what the sidecar says about the cache."""
    import hashlib
    import json
    import time

    import trtforge

    torch.manual_seed(0)
    model = TinyNet().eval()
    time.sleep(max(0.0, start_at - time.time()))  # every worker reaches the cache at the same moment
    art = trtforge.compile(model, (torch.zeros(*EXAMPLE_SHAPE),), output_dir=output_dir, cache_dir=cache_dir,
                           progress=False)
    print(json.dumps({"cache": art.sidecar.builder.cache,
                      "sha256": hashlib.sha256(art.engine_path.read_bytes()).hexdigest()}))


if __name__ == "__main__":
    import sys

    _worker(sys.argv[1], sys.argv[2], float(sys.argv[3]))
