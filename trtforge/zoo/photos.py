"""Real photos that ship inside scikit-image, cut into reproducible crops for accuracy checks.

Example:
    >>> crops = photo_crops(128, seed=0)          # (128, 224, 224, 3) uint8, RGB
    >>> x = normalize(crops, LITE0_PREPROCESSING)   # (128, 3, 224, 224) float32
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

#: skimage.data photos of real scenes (RGB, no download needed).
PHOTO_NAMES: tuple[str, ...] = (
    "astronaut", "chelsea", "coffee", "rocket", "hubble_deep_field", "immunohistochemistry", "retina",
)


def photos(names: Sequence[str] = PHOTO_NAMES) -> list[np.ndarray]:
    """The photos as HWC uint8 RGB arrays."""
    try:
        from skimage import data
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("photos come from scikit-image: pip install scikit-image") from exc
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


def normalize(images: np.ndarray, preprocessing: Mapping[str, Any]) -> np.ndarray:
    """NHWC uint8 → NCHW float32 with the sidecar's scale, mean and std (already at model size)."""
    x = images.astype(np.float32) * float(preprocessing.get("scale", 1.0 / 255.0))
    mean = np.asarray(preprocessing.get("mean", (0.0, 0.0, 0.0)), np.float32)
    std = np.asarray(preprocessing.get("std", (1.0, 1.0, 1.0)), np.float32)
    x = (x - mean) / std
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2))
