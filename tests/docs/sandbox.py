"""Files and objects the doc examples refer to, made small and offline, for the pages' hidden setups.

Example (a page's setup comment):
    <!-- doc-example: setup
    ```python
    from sandbox import *
    tiny_onnx("model.onnx"); photos("calib_images", 16)
    model, x = tiny_module(), torch.randn(2, 3, 32, 32)
    ```
    -->
"""

from __future__ import annotations

from pathlib import Path

import torch

__all__ = ["photos", "tiny_module", "tiny_onnx", "torch"]


class TinyNet(torch.nn.Module):
    """Conv → BN → ReLU → Conv → ReLU → pool → Linear: a 10-class classifier on 3×32×32 images."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.BatchNorm2d(32), torch.nn.ReLU(),
            torch.nn.Conv2d(32, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten())
        self.head = torch.nn.Linear(32, 10)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(images))


def tiny_module() -> torch.nn.Module:
    return TinyNet().eval()


def tiny_onnx(path: str | Path) -> Path:
    """``TinyNet`` as an ONNX file with a dynamic batch (input ``images``, output ``logits``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.onnx.export(tiny_module(), (torch.zeros(1, 3, 32, 32),), str(path), input_names=["images"],
                      output_names=["logits"], dynamic_axes={"images": {0: "batch"}, "logits": {0: "batch"}},
                      opset_version=17, dynamo=False)
    return path


def photos(folder: str | Path, count: int = 16) -> Path:
    """``count`` JPEG crops of scikit-image's photos in ``folder``."""
    from PIL import Image

    from trtforge.zoo.photos import photo_crops

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for i, crop in enumerate(photo_crops(count, size=64, seed=3)):
        Image.fromarray(crop).save(folder / f"{i:03d}.jpg")
    return folder
