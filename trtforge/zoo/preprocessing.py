"""The preprocessing record of ImageNet-trained vision models (what sidecars carry).

Example:
    >>> imagenet_preprocessing((224, 224))["mean"]
    [0.485, 0.456, 0.406]
"""

from __future__ import annotations


def imagenet_preprocessing(size: tuple[int, int]) -> dict:
    """Bilinear resize to ``size`` (no antialias), /255, ImageNet mean/std, RGB, NCHW."""
    return {
        "resize": [int(size[0]), int(size[1])],
        "interpolation": "bilinear",
        "antialias": False,
        "mean": [0.485, 0.456, 0.406],
        "std": [0.229, 0.224, 0.225],
        "scale": 1.0 / 255.0,
        "channel_order": "RGB",
        "layout": "NCHW",
    }
