"""A DETR-style detector for timing: ResNet-18-like backbone + 6-layer transformer decoder, 300 queries.

Random weights (seeded): it exists to time the runtime routes and the predictor's DETR decoding
on a realistic shape of work, not to detect anything. Outputs ``logits (B, 300, C)`` and
``boxes (B, 300, 4)`` as (cx, cy, w, h) in [0, 1], like DETR / RF-DETR.

Example:
    >>> from trtforge.zoo.detr_like import detr_like
    >>> model = detr_like()
    >>> logits, boxes = model(torch.zeros(1, 3, 640, 640))
    >>> logits.shape, boxes.shape
    (torch.Size([1, 300, 80]), torch.Size([1, 300, 4]))
"""

from __future__ import annotations

import torch
from torch import nn

from trtforge.zoo.preprocessing import imagenet_preprocessing

#: What the predictor does before the model (recorded in a sidecar like the zoo's Lite0).
DETR_LIKE_PREPROCESSING: dict = imagenet_preprocessing((640, 640))


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
        self.act = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.act(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return self.act(y + (x if self.down is None else self.down(x)))


class DetrLike(nn.Module):
    """Backbone (stride 32) → 1×1 projection + learned positions → decoder over 300 queries → heads."""

    def __init__(
        self, num_classes: int = 80, d_model: int = 256, num_queries: int = 300, decoder_layers: int = 6,
        heads: int = 8, ffn: int = 1024, image_size: tuple[int, int] = (640, 640),
    ) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1)
        )
        stages, cin = [], 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            stages += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
            cin = cout
        self.backbone = nn.Sequential(*stages)
        self.input_proj = nn.Conv2d(512, d_model, 1)
        tokens = (image_size[0] // 32) * (image_size[1] // 32)
        self.pos_embed = nn.Parameter(torch.randn(1, tokens, d_model) * 0.02)
        self.query_embed = nn.Parameter(torch.randn(1, num_queries, d_model) * 0.02)
        layer = nn.TransformerDecoderLayer(d_model, heads, ffn, dropout=0.0, batch_first=True)
        self.decoder = nn.TransformerDecoder(layer, decoder_layers)
        self.class_head = nn.Linear(d_model, num_classes)
        self.box_head = nn.Sequential(
            nn.Linear(d_model, d_model), nn.ReLU(), nn.Linear(d_model, d_model), nn.ReLU(), nn.Linear(d_model, 4)
        )
        self.output_names = ("logits", "boxes")

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        feature = self.input_proj(self.backbone(self.stem(images)))
        memory = feature.flatten(2).transpose(1, 2) + self.pos_embed
        queries = self.query_embed.expand(images.shape[0], -1, -1)
        hidden = self.decoder(queries, memory)
        return self.class_head(hidden), self.box_head(hidden).sigmoid()


def detr_like(seed: int = 0, **kwargs) -> DetrLike:
    """The timing detector in eval mode, random weights from ``seed``."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = DetrLike(**kwargs)
    model.preprocessing = dict(DETR_LIKE_PREPROCESSING)
    model.trtforge_factory = "trtforge.zoo.detr_like:detr_like"
    return model.eval()
