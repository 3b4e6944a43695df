"""A small conv model with a custom ``torch.library`` op in the middle (no converter exists for it), as a
module factory for ``trtforge coverage`` and the partitioned save/load tests."""

from __future__ import annotations

import torch
from torch import nn


@torch.library.custom_op("trtforge_doubles::jiggle", mutates_args=())
def jiggle(x: torch.Tensor) -> torch.Tensor:
    return torch.sin(x) * 2 + x.cumsum(-1) * 0.01


@jiggle.register_fake
def _(x):
    return torch.empty_like(x)


class ConvJiggleHead(nn.Module):
    """conv → batch norm → relu → jiggle (PyTorch) → linear → softmax."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = jiggle(torch.relu(self.bn(self.conv(x))))
        return torch.softmax(self.fc(y.flatten(2).mean(1)), -1)


def conv_jiggle_head() -> ConvJiggleHead:
    """The factory (seeded weights, eval mode)."""
    torch.manual_seed(0)
    return ConvJiggleHead().eval()


class NearestGridSample(nn.Module):
    """``grid_sample(mode="nearest")``: a converter exists, and its validator refuses the mode."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        grid = x[:, :2].permute(0, 2, 3, 1).tanh()
        return nn.functional.grid_sample(x, grid, mode="nearest", align_corners=False).relu()


def nearest_grid_sample() -> NearestGridSample:
    return NearestGridSample().eval()
