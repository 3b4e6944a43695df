"""Real photos that ship inside scikit-image, cut into reproducible crops for accuracy checks.

Example:
    >>> crops = photo_crops(128, seed=0)          # (128, 224, 224, 3) uint8, RGB
    >>> x = normalize(crops, LITE0_PREPROCESSING)   # (128, 3, 224, 224) float32, as the predictor feeds it
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from trtforge.core.errors import MissingDependency
from trtforge.core.preprocessing import ImageInputError, PreprocessConfig, transform

#: skimage.data photos of real scenes (RGB, no download needed).
PHOTO_NAMES: tuple[str, ...] = (
    "astronaut", "chelsea", "coffee", "rocket", "hubble_deep_field", "immunohistochemistry", "retina",
)


def photos(names: Sequence[str] = PHOTO_NAMES) -> list[np.ndarray]:
    """The photos as HWC uint8 RGB arrays."""
    try:
        from skimage import data
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise MissingDependency("photos come from scikit-image; install it with: pip install scikit-image") from exc
    return [np.ascontiguousarray(getattr(data, n)()[..., :3]) for n in names]


def photo_crops(count: int, size: int = 224, seed: int = 0, names: Sequence[str] = PHOTO_NAMES) -> np.ndarray:
    """``count`` random square crops (25–100% of the short side), resized bilinearly to ``size``."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    images = photos(names)
    out = np.empty((count, size, size, 3), np.uint8)
    for i in range(count):
        img = images[i % len(images)]
        h, w = img.shape[:2]
        side = int(min(h, w) * rng.uniform(0.25, 1.0))
        y = int(rng.integers(0, h - side + 1))
        x = int(rng.integers(0, w - side + 1))
        crop = Image.fromarray(img[y : y + side, x : x + side]).resize((size, size), Image.BILINEAR)
        out[i] = np.asarray(crop)
    return out


def normalize(images: np.ndarray, preprocessing: Mapping[str, Any] | PreprocessConfig) -> np.ndarray:
    """NHWC uint8 → the model input the record describes (float32; NCHW for ImageNet records).

    The predictor's transform (``trtforge.core.preprocessing``) on the CPU: resize when the
    crops are not at the model's size, then scale, mean, std, channel order and layout.
    """
    import torch

    if images.dtype != np.uint8 or images.ndim != 4:
        raise ImageInputError(f"normalize() takes NHWC uint8 pixels, got {images.dtype} {images.shape}; "
                              "pass photo_crops(...) or (x * 255).round().astype(np.uint8)")
    pixels = torch.from_numpy(np.require(images, requirements=("C", "W")))
    return transform(pixels, PreprocessConfig.of(preprocessing)).numpy()
