"""The one image preprocessing: the sidecar's record, image decoding, and the transform.

Calibration (``quantize.data``), the predictor (``vision.preprocess`` on CPU or GPU) and the zoo
all call ``transform_tensor``, so INT8 is calibrated on exactly the pixels the engine serves.
The steps, as the record says: resize (bilinear, bicubic or nearest; half-pixel centres, i.e.
``align_corners=False``; antialias when asked, which torch applies to bilinear and bicubic only;
``nearest`` is torch's ``mode="nearest"``), channel order, then ``x * scale``, minus mean, over
std (both given in the model's channel order, as BGR models record them), layout and dtype.
``resize_mode="letterbox"`` keeps the aspect instead of stretching, as ultralytics' ``LetterBox``
does: scale by ``r = min(H / h, W / w)`` to ``round(h * r) x round(w * r)``, centred (the top and left
borders ``(H - round(h * r)) // 2`` and ``(W - round(w * r)) // 2``), the border filled with
``pad_value`` in 0-255 pixels (114 grey) before the normalisation. ``resize_geometry`` says where an
image lands, so boxes can be mapped back to its pixels.

torch is imported inside the functions that need it: reading a sidecar's record stays light.

Example:
    >>> config = PreprocessConfig.from_dict({"resize": [224, 224], "mean": [0.5] * 3, "std": [0.5] * 3})
    >>> preprocess_images([decode_image("cat.jpg")], config).shape   # on the CPU
    torch.Size([1, 3, 224, 224])
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trtforge.core.errors import InvalidArgument, MissingFile, WrongType

if TYPE_CHECKING:
    import numpy as np
    import torch

ImageLike = Any  # str | Path | PIL.Image.Image | np.ndarray | torch.Tensor

INTERPOLATIONS: tuple[str, ...] = ("bilinear", "bicubic", "nearest")
CHANNEL_ORDERS: tuple[str, ...] = ("RGB", "BGR")
LAYOUTS: tuple[str, ...] = ("NCHW", "NHWC")
#: ``stretch``: resize to the model's size, aspect lost; ``letterbox``: aspect kept, centred, padded.
RESIZE_MODES: tuple[str, ...] = ("stretch", "letterbox")
#: ultralytics' letterbox border: grey 114, in 0-255 pixels.
DEFAULT_PAD_VALUE = 114.0
ACCEPTED_IMAGES = (
    "a file path, a PIL.Image, an HWC uint8 numpy array or torch tensor (RGB), or a list of these"
)


class ImageInputError(WrongType):
    """An image that cannot be preprocessed; the message lists what is accepted."""


class PreprocessingRecordError(InvalidArgument):
    """A ``preprocessing`` record (sidecar dict or ``PreprocessConfig``) that cannot work."""


@dataclass(frozen=True)
class PreprocessConfig:
    """The preprocessing a model expects; built from the sidecar's record and checked on creation.

    Example:
        >>> PreprocessConfig((224, 224), channel_order="BGR").layout
        'NCHW'
    """

    size: tuple[int, int]  # (height, width)
    mean: tuple[float, float, float] = (0.0, 0.0, 0.0)
    std: tuple[float, float, float] = (1.0, 1.0, 1.0)
    scale: float = 1.0 / 255.0
    interpolation: str = "bilinear"
    antialias: bool = False
    channel_order: str = "RGB"
    layout: str = "NCHW"
    resize_mode: str = "stretch"
    pad_value: float = DEFAULT_PAD_VALUE  # the letterbox border, in 0-255 pixels (before scale, mean, std)

    def __post_init__(self) -> None:
        problems = []
        if self.resize_mode not in RESIZE_MODES:
            problems.append(f"resize_mode {self.resize_mode!r} is not one of {RESIZE_MODES}")
        if isinstance(self.pad_value, bool) or not isinstance(self.pad_value, (int, float)) or not 0 <= self.pad_value <= 255:
            problems.append(f"pad_value {self.pad_value!r} is not a pixel value from 0 to 255 (114 is ultralytics' grey)")
        if len(self.size) != 2 or any(int(v) <= 0 for v in self.size):
            problems.append(f"size {self.size} is not a positive [height, width]")
        if len(self.mean) != 3 or len(self.std) != 3 or any(float(s) == 0.0 for s in self.std):
            problems.append(f"mean {self.mean} / std {self.std} need 3 values each, std non-zero")
        if self.interpolation not in INTERPOLATIONS:
            problems.append(f"interpolation {self.interpolation!r} is not one of {INTERPOLATIONS}")
        if self.channel_order not in CHANNEL_ORDERS or self.layout not in LAYOUTS:
            problems.append(f"channel_order {self.channel_order!r} / layout {self.layout!r} is not one of "
                            f"{CHANNEL_ORDERS} / {LAYOUTS}")
        if problems:
            raise PreprocessingRecordError(f"preprocessing record: {'; '.join(problems)}; fix the record")
        object.__setattr__(self, "pad_value", float(self.pad_value))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PreprocessConfig:
        """From a sidecar ``preprocessing`` dict (``resize`` is ``[height, width]``).

        Example:
            >>> PreprocessConfig.from_dict({"resize": [224, 224], "layout": "nhwc"}).layout
            'NHWC'
        """
        if not isinstance(data, Mapping) or "resize" not in data:
            raise PreprocessingRecordError(
                f"preprocessing record {data!r} has no 'resize': [height, width]; add the model's input size"
            )
        try:
            fields = {
                "size": (int(data["resize"][0]), int(data["resize"][1])),
                "mean": tuple(float(v) for v in data.get("mean", (0.0, 0.0, 0.0))),
                "std": tuple(float(v) for v in data.get("std", (1.0, 1.0, 1.0))),
                "scale": float(data.get("scale", 1.0 / 255.0)),
                "pad_value": float(data.get("pad_value", DEFAULT_PAD_VALUE)),
            }
        except (TypeError, ValueError, IndexError) as exc:
            raise PreprocessingRecordError(
                f"preprocessing record {dict(data)} has a value of the wrong kind ({exc}); resize is "
                "[height, width], mean and std are 3 numbers, scale and pad_value numbers"
            ) from exc
        return cls(
            **fields,
            interpolation=str(data.get("interpolation", "bilinear")).lower(),
            antialias=bool(data.get("antialias", False)),
            channel_order=str(data.get("channel_order", "RGB")).upper(),
            layout=str(data.get("layout", "NCHW")).upper(),
            resize_mode=str(data.get("resize_mode", "stretch")).lower(),
        )

    def to_dict(self) -> dict[str, Any]:
        """The sidecar's JSON record (``from_dict`` reads it back to an equal config).

        Example:
            >>> PreprocessConfig((224, 224)).to_dict()["resize"]
            [224, 224]
        """
        return {"resize": [int(v) for v in self.size], "interpolation": self.interpolation,
                "antialias": bool(self.antialias), "mean": [float(v) for v in self.mean],
                "std": [float(v) for v in self.std], "scale": float(self.scale),
                "channel_order": self.channel_order, "layout": self.layout,
                "resize_mode": self.resize_mode, "pad_value": float(self.pad_value)}

    @classmethod
    def of(cls, record: PreprocessConfig | Mapping[str, Any]) -> PreprocessConfig:
        """``record`` as a ``PreprocessConfig``: returned as it is, or built from a sidecar dict."""
        return record if isinstance(record, PreprocessConfig) else cls.from_dict(record)

    def coefficients(self, device: Any = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
        """``(a, b)`` of shape (1, 3, 1, 1) with ``(x * scale - mean) / std == x * a + b``."""
        import torch

        mean = torch.tensor(self.mean, dtype=torch.float32)
        std = torch.tensor(self.std, dtype=torch.float32)
        return (self.scale / std).view(1, 3, 1, 1).to(device), (-mean / std).view(1, 3, 1, 1).to(device)


@dataclass(frozen=True)
class ResizeGeometry:
    """Where an image lands in the model input: scaled by ``scale_y``/``scale_x`` to ``height`` x ``width``
    pixels, its top-left corner at (``top``, ``left``); the rest is the letterbox border.

    A point (x, y) of the model input is (``(x - left) / scale_x``, ``(y - top) / scale_y``) in the image.
    """

    scale_y: float
    scale_x: float
    top: int
    left: int
    height: int
    width: int


def resize_geometry(height: int, width: int, size: tuple[int, int], resize_mode: str = "stretch") -> ResizeGeometry:
    """Where an image of ``height`` x ``width`` lands in a model input of ``size`` (height, width).

    Example:
        >>> resize_geometry(480, 640, (320, 320), "letterbox")     # scale 0.5, 40-pixel bands above and below
        ResizeGeometry(scale_y=0.5, scale_x=0.5, top=40, left=0, height=240, width=320)
    """
    out_h, out_w = int(size[0]), int(size[1])
    if resize_mode != "letterbox":
        return ResizeGeometry(out_h / height, out_w / width, 0, 0, out_h, out_w)
    r = min(out_h / height, out_w / width)
    new_h, new_w = round(height * r), round(width * r)
    return ResizeGeometry(r, r, (out_h - new_h) // 2, (out_w - new_w) // 2, new_h, new_w)


def _np():
    """numpy, imported when an image is handled (reading a sidecar's record needs none of it)."""
    import numpy

    return numpy


def decode_image(image: ImageLike) -> np.ndarray | torch.Tensor:
    """Anything the predictor accepts → an HWC uint8 RGB array (tensors stay tensors, on their device).

    Example:
        >>> decode_image("cat.png").shape
        (480, 640, 3)
    """
    if isinstance(image, (str, Path)):
        from PIL import Image

        path = Path(image)
        if not path.is_file():
            raise MissingFile(f"no image file at {path}; pass the path of an existing image")
        with Image.open(path) as img:
            return _np().asarray(img.convert("RGB"))
    if type(image).__module__.startswith("PIL."):
        return _np().asarray(image.convert("RGB"))
    torch = sys.modules.get("torch")  # a tensor exists only once torch is imported
    numpy = sys.modules.get("numpy")  # likewise an array exists only once numpy is imported
    if (numpy is not None and isinstance(image, numpy.ndarray)) or (torch is not None and isinstance(image, torch.Tensor)):
        return _check_pixels(image)
    raise ImageInputError(f"unknown image type {type(image).__name__}; pass {ACCEPTED_IMAGES}")


def _check_pixels(image: np.ndarray | torch.Tensor) -> np.ndarray | torch.Tensor:
    """An HWC uint8 array or tensor, grey expanded to 3 channels; anything else refused with the fix."""
    numpy = sys.modules.get("numpy")  # compare dtypes, never their names: str(dtype) cost 8 µs a frame
    if numpy is not None and isinstance(image, numpy.ndarray):
        uint8 = image.dtype == numpy.uint8
    else:
        uint8 = image.dtype is sys.modules["torch"].uint8
    if not uint8:
        raise ImageInputError(
            f"image array has dtype {image.dtype}; pass uint8 pixels (0-255), e.g. "
            "(x * 255).round().astype(np.uint8)"
        )
    if image.ndim == 2:
        image = image[..., None].expand(-1, -1, 3) if hasattr(image, "expand") else image[..., None].repeat(3, axis=2)
    if image.ndim != 3 or image.shape[2] != 3:
        raise ImageInputError(
            f"image array has shape {tuple(image.shape)}; pass HWC with 3 channels (RGB). "
            "For CHW use x.permute(1, 2, 0); for RGBA drop alpha with x[..., :3]"
        )
    return image


def transform_tensor(
    u8: torch.Tensor, a: torch.Tensor, b: torch.Tensor, size: tuple[int, int], interpolation: str,
    antialias: bool, bgr: bool, nhwc: bool, dtype: torch.dtype, channels_last: bool,
    resize_mode: str = "stretch", pad_value: float = DEFAULT_PAD_VALUE,
) -> torch.Tensor:
    """(B, H, W, 3) uint8 → the model input, from plain values: ``x * a + b`` after the resize
    (and, for ``resize_mode="letterbox"``, the border of ``pad_value``; ``resize_geometry`` places it).

    Every argument but the three tensors is a constant, so one compiled version serves every
    preprocessor with the same record (``vision.preprocess.fused_transform``).
    """
    import torch
    import torch.nn.functional as F

    x = u8.permute(0, 3, 1, 2).float()
    if bgr:
        x = x.flip(1)
    where = resize_geometry(int(x.shape[-2]), int(x.shape[-1]), size, resize_mode)
    if (int(x.shape[-2]), int(x.shape[-1])) != (where.height, where.width):
        kwargs = {} if interpolation == "nearest" else {"align_corners": False, "antialias": antialias}
        x = F.interpolate(x, size=(where.height, where.width), mode=interpolation, **kwargs)
    if (where.height, where.width) != tuple(size):  # the letterbox border, in pixels before the normalisation
        bottom, right = size[0] - where.height - where.top, size[1] - where.width - where.left
        x = F.pad(x, (where.left, right, where.top, bottom), value=float(pad_value))
    x = torch.addcmul(b, x, a)
    if nhwc:
        return x.permute(0, 2, 3, 1).contiguous().to(dtype)
    return x.to(dtype, memory_format=torch.channels_last if channels_last else torch.contiguous_format)


def transform(
    u8: torch.Tensor, config: PreprocessConfig, dtype: torch.dtype | None = None, channels_last: bool = False, *,
    coefficients: tuple[torch.Tensor, torch.Tensor] | None = None, step: Any = transform_tensor,
) -> torch.Tensor:
    """(B, H, W, 3) uint8 on any device → the model input ``config`` describes (float32 by default).

    ``coefficients`` are ``config.coefficients(u8.device)``, cached by callers that run per frame;
    ``step`` is ``transform_tensor`` or its compiled version.

    Example:
        >>> transform(torch.zeros(1, 480, 640, 3, dtype=torch.uint8), PreprocessConfig((224, 224))).shape
        torch.Size([1, 3, 224, 224])
    """
    import torch

    a, b = coefficients if coefficients is not None else config.coefficients(u8.device)
    return step(u8, a, b, config.size, config.interpolation, config.antialias, config.channel_order == "BGR",
                config.layout == "NHWC", dtype or torch.float32, channels_last, config.resize_mode,
                float(config.pad_value))


def preprocess_images(images: Sequence[ImageLike], config: PreprocessConfig) -> torch.Tensor:
    """Images of any sizes (paths, PIL, HWC uint8) → one float32 model-input batch on the CPU.

    Example:
        >>> preprocess_images(["a.jpg", "b.png"], config).shape
        torch.Size([2, 3, 224, 224])
    """
    import torch

    a, b = config.coefficients("cpu")
    pixels = [_host_tensor(decode_image(image)) for image in images]
    return torch.cat([transform(p[None], config, coefficients=(a, b)) for p in pixels])


def _host_tensor(pixels: np.ndarray | torch.Tensor) -> torch.Tensor:
    """A CPU tensor of ``pixels``; read-only arrays (PIL's) are copied, since torch wants writable ones."""
    import torch

    np = _np()
    if isinstance(pixels, np.ndarray):
        return torch.from_numpy(np.require(pixels, requirements=("C", "W")))
    return pixels.cpu()


def read_preprocessing_json(path: Path | None) -> dict | None:
    """A preprocessing dict from a JSON file: a plain dict or a sidecar's ``preprocessing`` block."""
    if path is None:
        return None
    if not Path(path).is_file():
        raise MissingFile(f"preprocessing file {path} does not exist; pass a JSON file (or a sidecar)")
    try:
        data = json.loads(Path(path).read_text())
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidArgument(f"preprocessing file {path} is not valid JSON ({exc}); pass a JSON object such as "
                          "{\"resize\": [224, 224], \"mean\": [...]} or a trtforge sidecar") from exc
    if not isinstance(data, dict):
        raise InvalidArgument(f"{path} must hold a JSON object such as {{\"resize\": [224, 224], \"mean\": [...]}}")
    return data.get("preprocessing", data)
