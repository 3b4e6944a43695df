"""Small transformer blocks for the direct path's model tests: a ViT block and a Swin-style
shifted-window attention block (relative position bias, roll, window partition, attention mask)."""

from __future__ import annotations

import torch
from torch import nn


class ViTBlock(nn.Module):
    """Patch embedding + class token + positions + one pre-norm encoder block + head."""

    def __init__(self, dim: int = 64, heads: int = 4, patch: int = 8, image: int = 32, classes: int = 10) -> None:
        super().__init__()
        self.embed = nn.Conv2d(3, dim, patch, patch)
        self.cls = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, (image // patch) ** 2 + 1, dim) * 0.02)
        self.norm1, self.norm2, self.norm = nn.LayerNorm(dim), nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.head = nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = self.embed(x).flatten(2).transpose(1, 2)
        tokens = torch.cat([self.cls.expand(x.shape[0], -1, -1), tokens], 1) + self.pos
        h = self.norm1(tokens)
        tokens = tokens + self.attn(h, h, h, need_weights=False)[0]
        tokens = tokens + self.mlp(self.norm2(tokens))
        return self.head(self.norm(tokens)[:, 0])


def _relative_index(window: int) -> torch.Tensor:
    coords = torch.stack(torch.meshgrid(torch.arange(window), torch.arange(window), indexing="ij")).flatten(1)
    rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0) + window - 1
    return rel[..., 0] * (2 * window - 1) + rel[..., 1]


class SwinBlock(nn.Module):
    """One shifted-window attention block in Swin's formulation, on a (B, H, W, C) feature map."""

    def __init__(self, dim: int = 32, heads: int = 2, window: int = 4, size: int = 8, shift: int = 2) -> None:
        super().__init__()
        self.dim, self.heads, self.window, self.shift, self.size = dim, heads, window, shift, size
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.bias_table = nn.Parameter(torch.randn((2 * window - 1) ** 2, heads) * 0.02)
        self.register_buffer("rel_index", _relative_index(window), persistent=False)
        self.register_buffer("mask", self._shift_mask(), persistent=False)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def _shift_mask(self) -> torch.Tensor:
        img = torch.zeros(1, self.size, self.size, 1)
        spans = (slice(0, -self.window), slice(-self.window, -self.shift), slice(-self.shift, None))
        for n, (h, w) in enumerate((h, w) for h in spans for w in spans):
            img[:, h, w, :] = n
        windows = self._partition(img).squeeze(-1)
        diff = windows[:, None, :] - windows[:, :, None]
        return diff.ne(0).float() * -100.0

    def _partition(self, x: torch.Tensor) -> torch.Tensor:
        b, h, w, c = x.shape
        win = self.window
        x = x.view(b, h // win, win, w // win, win, c).permute(0, 1, 3, 2, 4, 5)
        return x.reshape(-1, win * win, c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, h, w, c = x.shape
        win, heads = self.window, self.heads
        shortcut = x
        x = torch.roll(self.norm1(x), (-self.shift, -self.shift), (1, 2))
        windows = self._partition(x)
        qkv = self.qkv(windows).reshape(-1, win * win, 3, heads, c // heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        attn = (q * (c // heads) ** -0.5) @ k.transpose(-2, -1)
        bias = self.bias_table[self.rel_index.reshape(-1)].reshape(win * win, win * win, heads).permute(2, 0, 1)
        attn = attn + bias.unsqueeze(0)
        count = self.mask.shape[0]
        attn = attn.view(-1, count, heads, win * win, win * win) + self.mask.unsqueeze(1).unsqueeze(0)
        attn = attn.view(-1, heads, win * win, win * win).softmax(-1)
        out = self.proj((attn @ v).transpose(1, 2).reshape(-1, win * win, c))
        out = out.view(b, h // win, w // win, win, win, c).permute(0, 1, 3, 2, 4, 5).reshape(b, h, w, c)
        x = shortcut + torch.roll(out, (self.shift, self.shift), (1, 2))
        return x + self.mlp(self.norm2(x))


class GridSampleHead(nn.Module):
    """Deformable-attention-style sampling: offsets from a conv, grid_sample of the features."""

    def __init__(self, channels: int = 8, points: int = 6) -> None:
        super().__init__()
        self.offsets = nn.Linear(channels, points * 2)
        self.points = points

    def forward(self, features: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
        grid = torch.tanh(self.offsets(queries)).view(queries.shape[0], queries.shape[1], self.points, 2)
        sampled = nn.functional.grid_sample(features, grid, align_corners=False)
        return sampled.mean(-1).transpose(1, 2)
