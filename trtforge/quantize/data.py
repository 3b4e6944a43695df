"""Calibration data: every accepted source becomes a list of one-sample feeds, checked up front.

Accepted sources:
* a directory of images: sorted by file name, the first ``max_images``, preprocessed as the
  sidecar's ``preprocessing`` dict says, by the predictor's own transform on the CPU
  (``trtforge.core.preprocessing``), so calibration sees the pixels inference serves;
* a ``.npy`` file or a float array shaped like the input (already normalised); a ``.npz`` file
  with one array per input name for multi-input models;
* a torch tensor anywhere an array goes (detached and copied to the CPU);
* a dict ``{input_name: array}``, or a tuple/list of arrays, one per input, for multi-input models
  (MiniLM: ``(input_ids, attention_mask)``), each holding N samples along axis 0;
* an iterable of any of those (a one-input model: arrays; several inputs: dicts or tuples), one sample or a
  batch each;
* a callable returning any of the above.

Errors (``CalibrationDataError``) name the problem and the fix, and come before calibration.

Example:
    >>> samples = load_calibration(Path("calib/"), model_inputs, LITE0_PREPROCESSING)
    >>> samples[0]["images"].shape
    (1, 3, 224, 224)
"""

from __future__ import annotations

import hashlib
import logging
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PIL import UnidentifiedImageError

from trtforge.core.errors import InvalidArgument, spelled
from trtforge.core.preprocessing import ImageLike, PreprocessConfig, preprocess_images

log = logging.getLogger(__name__)

IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff", ".ppm"})
InputSpec = tuple[str, np.dtype, tuple]  # (name, dtype, shape with None for dynamic dims)


class CalibrationDataError(InvalidArgument):
    """Calibration data that cannot be used; the message says how to fix it."""


# -- images ----------------------------------------------------------------------------------
def preprocess_image(image: ImageLike, preprocessing: Mapping | PreprocessConfig) -> np.ndarray:
    """One image (path, PIL image or HxWxC uint8 array) → the float32 model input with batch 1.

    The predictor's transform (``trtforge.core.preprocessing``), run on the CPU.

    Example:
        >>> preprocess_image(Image.open("cat.jpg"), LITE0_PREPROCESSING).shape
        (1, 3, 224, 224)
    """
    return preprocess_images([image], PreprocessConfig.of(preprocessing)).numpy()


def image_files(directory: Path, max_images: int) -> list[Path]:
    files = sorted(p for p in Path(directory).iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    return files[:max_images]


# -- sources → samples -------------------------------------------------------------------------
def _split_batch(name: str, arr: np.ndarray, rank: int) -> list[np.ndarray]:
    if arr.ndim == rank:
        return [arr[i : i + 1] for i in range(arr.shape[0])]
    if arr.ndim == rank - 1:
        return [arr[None]]
    raise CalibrationDataError(
        f"calibration input {name!r} has shape {arr.shape} (rank {arr.ndim}), but the model input has "
        f"rank {rank}; pass arrays shaped like the input, e.g. (N, ...) with the model's other dims"
    )


def _check_array(name: str, arr: np.ndarray, spec: InputSpec) -> np.ndarray:
    _, dtype, shape = spec
    arr = np.asarray(arr)
    if dtype.kind == "f":
        if arr.dtype.kind in "iub":
            raise CalibrationDataError(
                f"calibration input {name!r} is an integer array ({arr.dtype}), which looks like raw pixels; "
                "the model takes normalised floats. Pass a directory of images (trtforge applies the "
                "sidecar's preprocessing), or normalise first, e.g. "
                "((x / 255.0 - mean) / std).astype(np.float32) in the model's layout"
            )
        if arr.dtype.kind != "f":
            raise CalibrationDataError(f"calibration input {name!r} has dtype {arr.dtype}; pass float32 arrays")
        if arr.dtype.itemsize > dtype.itemsize:
            log.warning("calibration input %r is %s; the model takes %s, so it is cast (values beyond %s's "
                        "range or precision change). Pass %s arrays to silence this", name, arr.dtype, dtype,
                        dtype, dtype)
        arr = arr.astype(dtype, copy=False)
    elif dtype.kind in "iu":
        if arr.dtype.kind not in "iu":
            raise CalibrationDataError(
                f"calibration input {name!r} has dtype {arr.dtype}, but the model takes {dtype} "
                "(token ids or masks); pass integer arrays"
            )
        arr = arr.astype(dtype, copy=False)
    for axis, (got, want) in enumerate(zip(arr.shape[1:], shape[1:], strict=False), start=1):
        if want is not None and want > 0 and got != want:
            raise CalibrationDataError(
                f"calibration input {name!r} has shape {arr.shape}; the model expects {_fmt(shape)} "
                f"(axis {axis} is {got}, not {want}). Resize or pad the data to the model's input shape"
            )
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        bad = int((~np.isfinite(arr)).sum())
        raise CalibrationDataError(
            f"calibration input {name!r} contains {bad} NaN/Inf values; remove or repair those samples"
        )
    return arr


def _fmt(shape: tuple) -> str:
    return "(" + ", ".join("N" if i == 0 and d is None else ("?" if d is None else str(d))
                           for i, d in enumerate(shape)) + ")"


def _from_arrays(data: Mapping[str, np.ndarray], specs: Sequence[InputSpec]) -> list[dict[str, np.ndarray]]:
    by_name = {s[0]: s for s in specs}
    missing = [n for n in by_name if n not in data]
    extra = [n for n in data if n not in by_name]
    if missing or extra:
        raise CalibrationDataError(
            f"calibration dict has keys {sorted(data)}; the model's inputs are {sorted(by_name)} "
            f"(missing {missing}, unknown {extra}). Use the model's input names as keys"
        )
    split = {}
    for name, spec in by_name.items():
        arr = as_array(data[name])
        arr = _check_array(name, np.asarray(data[name]) if arr is None else arr, spec)
        split[name] = _split_batch(name, arr, len(spec[2]))
    counts = {n: len(v) for n, v in split.items()}
    if len(set(counts.values())) != 1:
        raise CalibrationDataError(f"calibration inputs hold different sample counts {counts}; give each the same N")
    n = next(iter(counts.values()))
    return [{name: split[name][i] for name in by_name} for i in range(n)]


#: What ``calibration_data=`` accepts, for the refusal of anything else.
ACCEPTED = ("a directory of images, a .npy/.npz file, an array or torch tensor (N samples along axis 0), "
            "a dict {input_name: array}, a tuple of arrays (one per input), an iterable of those, "
            "or a callable returning one of these")


def load_calibration(
    source,
    specs: Sequence[InputSpec],
    preprocessing: Mapping | None = None,
    max_images: int = 128,
) -> list[dict[str, np.ndarray]]:
    """Every sample as a feed dict of arrays with batch 1; raises CalibrationDataError early.

    The one normalisation of calibration data, whatever the caller holds: numpy arrays and torch tensors
    (any device, detached) alike. A tuple or list of arrays is one array per input when the model has
    that many inputs (``(ids, mask)``); otherwise its items are samples (or batches) of a one-input model.

    Example:
        >>> load_calibration((torch.zeros(8, 16, dtype=torch.long), torch.ones(8, 16, dtype=torch.long)),
        ...                  [("ids", np.dtype("int64"), (None, 16)), ("mask", np.dtype("int64"), (None, 16))])[0]["ids"].shape
        (1, 16)
    """
    if source is None:
        raise CalibrationDataError(
            "this quantized precision needs calibration data: pass calibration_data= " + ACCEPTED)
    if callable(source) and not isinstance(source, (str, Path, np.ndarray)):
        source = source()
    if isinstance(source, (str, Path)):
        path = Path(source)
        if path.is_dir():
            return _load_image_dir(path, specs, preprocessing, max_images)
        if path.suffix in (".npy", ".npz") and path.is_file():
            source = _load_arrays(path)
        elif not path.exists():
            raise CalibrationDataError(f"calibration data {path} does not exist; pass an image directory or a .npy file")
        else:
            raise CalibrationDataError(
                f"calibration data {path} is neither a directory of images nor a .npy/.npz file; "
                "save arrays with np.save(path, x) (np.savez(path, **inputs) for several inputs) "
                "or point at a folder of images"
            )
    samples = _one_item(source, specs)
    if samples is not None:
        return samples
    if isinstance(source, Iterable) and not isinstance(source, (bytes, bytearray)):
        samples = []
        for index, item in enumerate(source):
            found = _one_item(item, specs)
            if found is None:
                raise CalibrationDataError(
                    f"calibration_data item {index} is a {type(item).__name__}; each item must be "
                    f"{_item_forms(specs)}")
            samples.extend(found)
        return samples
    raise CalibrationDataError(f"calibration_data of type {type(source).__name__} is not supported; pass {ACCEPTED}")


def as_array(value: Any) -> np.ndarray | None:
    """``value`` as a numpy array when it is one, or a torch tensor (detached, copied to the CPU; BF16 as
    float32); else None.

    Example:
        >>> as_array(torch.ones(2, requires_grad=True))
        array([1., 1.], dtype=float32)
    """
    if isinstance(value, np.ndarray):
        return value
    if all(hasattr(value, attr) for attr in ("detach", "cpu", "numpy", "dtype")):
        tensor = value.detach().cpu()
        if str(tensor.dtype) == "torch.bfloat16":  # numpy has no bfloat16
            tensor = tensor.float()
        return tensor.numpy()
    return None


def _one_item(item: Any, specs: Sequence[InputSpec]) -> list[dict[str, np.ndarray]] | None:
    """The samples of one array, dict or tuple of per-input arrays; None when ``item`` is none of those."""
    names = [s[0] for s in specs]
    arr = as_array(item)
    if arr is not None:
        if len(specs) != 1:
            raise CalibrationDataError(
                f"the model has {len(specs)} inputs ({', '.join(names)}); pass a dict {{input_name: array}} or "
                f"a tuple of {len(specs)} arrays in that order, not one array")
        return _from_arrays({names[0]: arr}, specs)
    if isinstance(item, Mapping):
        return _from_arrays(item, specs)
    if isinstance(item, (tuple, list)) and len(item) == len(specs):
        arrays = [as_array(x) for x in item]
        if all(a is not None for a in arrays):
            return _from_arrays(dict(zip(names, arrays, strict=True)), specs)
    return None


def _item_forms(specs: Sequence[InputSpec]) -> str:
    names = ", ".join(s[0] for s in specs)
    if len(specs) == 1:
        return f"an array or torch tensor for input {names}, or a dict {{{specs[0][0]!r}: array}}"
    return f"a dict {{input_name: array}} or a tuple of {len(specs)} arrays or tensors ({names})"


def _load_arrays(path: Path) -> np.ndarray | dict[str, np.ndarray]:
    """A ``.npy`` array or a ``.npz``'s arrays (one per input name); a file numpy cannot read is refused."""
    try:
        if path.suffix == ".npy":
            return np.load(path, allow_pickle=False)
        with np.load(path, allow_pickle=False) as archive:  # multi-input: one array per input name
            return {k: archive[k] for k in archive.files}
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
        raise CalibrationDataError(
            f"calibration data {path} is not a readable {path.suffix} array file ({exc}); save arrays with "
            "np.save(path, x) (np.savez(path, **inputs) for several inputs), without pickled objects"
        ) from exc


def _preprocess_file(file: Path, config: PreprocessConfig) -> np.ndarray:
    """One calibration image, preprocessed; a file that is no readable image is refused by name."""
    try:
        return preprocess_image(file, config)
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise CalibrationDataError(
            f"calibration image {file} cannot be read as an image ({exc}); remove it from the folder or "
            "replace it with a JPEG/PNG"
        ) from exc


def _load_image_dir(path: Path, specs, preprocessing, max_images: int) -> list[dict[str, np.ndarray]]:
    if len(specs) != 1:
        raise CalibrationDataError(
            f"a directory of images calibrates single-input models; this one has inputs "
            f"{[s[0] for s in specs]}. Pass an iterable of dicts of arrays instead"
        )
    if not preprocessing:
        raise CalibrationDataError(
            f"calibration images in {path} need the model's preprocessing (resize, mean, std, layout); "
            "give compile(..., preprocessing=...) or pass already-normalised arrays (.npy)"
        )
    files = image_files(path, max_images)
    if not files:
        raise CalibrationDataError(
            f"{path} holds no images ({', '.join(sorted(IMAGE_SUFFIXES))}); put calibration images there"
        )
    config = PreprocessConfig.of(preprocessing)
    name = specs[0][0]
    return [{name: _check_array(name, _preprocess_file(file, config), specs[0])} for file in files]


def check_count(samples: Sequence[dict], batch_size: int, held_back: int) -> None:
    """Enough samples for one calibration batch plus the held-back ones?"""
    need = batch_size + held_back
    if len(samples) < need:
        raise CalibrationDataError(
            f"{len(samples)} calibration samples are too few: one batch of {batch_size} plus {held_back} "
            f"held back for the accuracy report needs {need}. Give more samples (128 is typical), or lower "
            + spelled(cli="--calib-batch-size / --holdout", python="QuantConfig.batch_size / holdout")
        )


class Batches(Sequence):
    """One-sample feeds grouped into batches, each concatenated only when it is read.

    Iterating holds one batch at a time, not a second copy of every sample: calibration memory
    does not grow with the sample count beyond the samples themselves. ``a + b`` chains two lists
    of batches (each keeps its own grouping).

    Example:
        >>> held = batches(samples[:12], 8)
        >>> len(held), held[1]["x"].shape[0]
        (2, 4)
    """

    def __init__(self, chunks: Sequence[Sequence[dict[str, np.ndarray]]]) -> None:
        self.chunks = tuple(chunks)

    def __len__(self) -> int:
        return len(self.chunks)

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return Batches(self.chunks[index])
        chunk = self.chunks[index]
        return {k: np.concatenate([s[k] for s in chunk], axis=0) for k in chunk[0]}

    def __add__(self, other: Batches) -> Batches:
        return Batches(self.chunks + other.chunks)


def batches(samples: Sequence[dict[str, np.ndarray]], batch_size: int) -> Batches:
    """Group one-sample feeds into batches of ``batch_size`` (the last one may be smaller), concatenated when read."""
    return Batches([samples[start : start + batch_size] for start in range(0, len(samples), batch_size)])


def data_hash(samples: Iterable[dict[str, np.ndarray]]) -> str:
    """sha256 over names, dtypes, shapes and bytes of every sample, in order."""
    digest = hashlib.sha256()
    for sample in samples:
        for name in sorted(sample):
            arr = np.ascontiguousarray(sample[name])
            digest.update(f"{name}|{arr.dtype}|{arr.shape}".encode())
            digest.update(arr.tobytes())
    return digest.hexdigest()

