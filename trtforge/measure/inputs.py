"""Inputs for ``check``, ``compare`` and ``bench``: from a saved ``.npz``, or made from the specs and profiles.

An image model whose sidecar records its preprocessing gets real photo crops (scikit-image's
photos, through the one preprocessing), so task metrics such as top-1 agreement mean something;
other float inputs get standard normal values, integer inputs 0/1 (valid token ids and masks).

Example:
    >>> x = make_inputs(sidecar.inputs, sidecar.profiles, 32, sidecar.preprocessing)
    >>> x["images"].shape, x["images"].dtype
    ((32, 3, 224, 224), dtype('float32'))
    >>> [b["images"].shape[0] for b in split_batches(x, 8)]
    [8, 8, 8, 8]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from trtforge.core.errors import InvalidArgument, MissingFile
from trtforge.core.preprocessing import PreprocessConfig
from trtforge.core.specs import TensorSpec

Arrays = dict[str, np.ndarray]
#: The batch for a dynamic batch dim that no profile bounds (a bare ONNX file).
CHECK_BATCH = 4


def unbatched(inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec] = ()) -> bool:
    """Whether a model has no sample axis to split along: no inputs, or a rank-0 input or output.
    Such a model runs one call on one set of inputs, and its outputs are compared as they are.

    Example:
        >>> unbatched((TensorSpec("x", "float32", (1, 4)),), (TensorSpec("y", "float32", ()),))
        True
    """
    return not inputs or any(not s.shape for s in (*inputs, *outputs))


def batch_size(specs: Sequence[TensorSpec], profiles: Sequence[Mapping[str, Any]], count: int) -> int:
    """The batch both sides run at: the profiles' largest ``opt`` batch (a static batch as it is;
    ``CHECK_BATCH`` without profiles), at most ``count``."""
    first = specs[0]
    if first.shape and first.shape[0] > 0:
        return first.shape[0]
    opts = [p[first.name]["opt"][0] for p in profiles if first.name in p]
    maxes = [p[first.name]["max"][0] for p in profiles if first.name in p]
    best = max(opts) if opts else CHECK_BATCH
    return max(1, min(best, max(maxes) if maxes else best, count))


def batch_range(specs: Sequence[TensorSpec], profiles: Sequence[Mapping[str, Any]]) -> tuple[int, int] | None:
    """(smallest, largest) batch a model takes: 1 and 1 with no sample axis (``unbatched``), its dim 0 twice when
    that is static, the profiles' smallest ``min`` and largest ``max`` when dynamic (None: no profile bounds it).

    Example:
        >>> batch_range((TensorSpec("x", "float32", (-1, 3)),), ({"x": {"min": [1, 3], "max": [16, 3]}},))
        (1, 16)
    """
    if unbatched(specs):
        return 1, 1
    rows = static_rows(specs, 1)
    if rows is not None:
        return rows, rows
    first = specs[0].name
    mins = [int(p[first]["min"][0]) for p in profiles if first in p]
    maxes = [int(p[first]["max"][0]) for p in profiles if first in p]
    return (min(mins), max(maxes)) if mins and maxes else None


def static_rows(specs: Sequence[TensorSpec], count: int) -> int | None:
    """Rows to make for ``count`` samples of a static-batch model: ``count`` rounded up to a multiple of
    the batch, when every input has the same static dim 0 (the batch); None otherwise (dynamic, or no
    common batch dim: such a model runs one sample as it is).

    Example:
        >>> static_rows((TensorSpec("x", "float32", (2, 3)),), 5)
        6
    """
    firsts = {spec.shape[0] if spec.shape else 0 for spec in specs}
    if len(firsts) != 1 or min(firsts) <= 0:
        return None
    batch = firsts.pop()
    return batch * -(-count // batch)


def _shape(spec: TensorSpec, profiles: Sequence[Mapping[str, Any]], count: int, rows: int | None = None
           ) -> tuple[int, ...]:
    opt = next((p[spec.name]["opt"] for p in profiles if spec.name in p), None)
    dims = []
    for axis, dim in enumerate(spec.shape):
        if axis == 0 and rows is not None:
            dims.append(rows)  # static batch: whole batches, split again by ``batch_size``
        elif axis == 0 and dim < 0:
            dims.append(count)
        elif dim < 0:
            dims.append(int(opt[axis]) if opt is not None else 1)
        else:
            dims.append(dim)
    return tuple(dims)


def _photos(count: int, preprocessing: PreprocessConfig | Mapping[str, Any], seed: int) -> np.ndarray:
    from trtforge.zoo.photos import normalize, photo_crops

    config = PreprocessConfig.of(preprocessing)
    return np.ascontiguousarray(normalize(photo_crops(count, size=config.size[0], seed=seed), config))


def make_inputs(
    specs: Sequence[TensorSpec], profiles: Sequence[Mapping[str, Any]], count: int,
    preprocessing: PreprocessConfig | Mapping[str, Any] | None = None, seed: int = 0,
) -> Arrays:
    """``count`` samples per input (dims from the specs, dynamic ones from the first profile's ``opt``).

    Example:
        >>> make_inputs((TensorSpec("x", "float32", (-1, 3)),), (), 4)["x"].shape
        (4, 3)
    """
    if count < 1:
        raise InvalidArgument(f"samples={count}: check at least 1 sample, e.g. --samples 32")
    rng = np.random.default_rng(seed)
    arrays: Arrays = {}
    rows = static_rows(specs, count)
    for spec in specs:
        shape = _shape(spec, profiles, count, rows)
        if preprocessing and len(specs) == 1 and len(shape) == 4 and spec.dtype.startswith("float"):
            arrays[spec.name] = _photos(shape[0], preprocessing, seed).astype(spec.dtype)
        elif spec.dtype.startswith(("float", "bfloat")):
            arrays[spec.name] = np.asarray(rng.standard_normal(shape)).astype(np.float32 if spec.dtype == "bfloat16" else spec.dtype)
        elif spec.dtype == "bool":
            arrays[spec.name] = rng.integers(0, 2, shape).astype(bool)
        else:
            arrays[spec.name] = rng.integers(0, 2, shape).astype(spec.dtype)
    return arrays


def read_npz(path: Path) -> Arrays:
    """Every array of the ``.npz`` at ``path``; a missing or unreadable file is refused in one line."""
    import zipfile

    path = Path(path)
    if not path.is_file():
        raise MissingFile(f"no inputs file at {path}; save one with trtforge compare ... --save-inputs {path}")
    try:
        with np.load(path, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, AttributeError) as exc:
        raise InvalidArgument(f"{path} is not a readable .npz of arrays ({str(exc).split('. ')[0]}); save one with "
                              f"numpy.savez({path.name!r}, name=array, ...) or trtforge compare ... --save-inputs "
                              f"{path}") from exc


def load_npz(path: Path, specs: Sequence[TensorSpec], batched: bool = True) -> Arrays:
    """The arrays of a ``.npz`` named like ``specs`` (extra arrays are refused, so a typo shows)."""
    path = Path(path)
    arrays = read_npz(path)
    names = [s.name for s in specs]
    missing = [n for n in names if n not in arrays]
    extra = sorted(set(arrays) - set(names))
    if missing or extra:
        raise InvalidArgument(f"{path} holds {sorted(arrays)}, the model takes {names}: "
                              "save one array per input, named like the input")
    counts = {arrays[n].shape[0] if arrays[n].ndim else 0 for n in names}
    if batched and (len(counts) != 1 or 0 in counts):
        raise InvalidArgument(f"{path}: every input needs the same leading (sample) dim, got "
                              f"{ {n: arrays[n].shape for n in names} }")
    return {n: arrays[n] for n in names}


def refuse_bad_indices(arrays: Mapping[str, np.ndarray], graphs: Sequence[Path | None]) -> None:
    """Refuse given inputs whose integer arrays index past a table of one of ``graphs`` (token ids beyond the
    vocabulary), before anything runs: ONNX Runtime's Gather would fail half-way. Calibration checks the same
    (``passes.index_ranges``).

    Example:
        >>> refuse_bad_indices({"input_ids": np.array([[5000]])}, [Path("minilm.onnx")])
        InvalidArgument: --inputs input 'input_ids' holds index 5000, and node ... a table of 1000 rows ...
    """
    if not any(np.asarray(a).dtype.kind in "iu" for a in arrays.values()):
        return
    from trtforge.core.errors import spelled
    from trtforge.passes.graph import load_ir
    from trtforge.passes.index_ranges import index_overflow

    for graph in dict.fromkeys(g for g in graphs if g is not None and Path(g).is_file()):
        overflow = index_overflow(load_ir(Path(graph)), [arrays])
        if overflow is not None:
            raise InvalidArgument(overflow.describe(spelled("--inputs input", "inputs= array")))


def split_batches(arrays: Mapping[str, np.ndarray], batch: int) -> list[Arrays]:
    """Consecutive batches of at most ``batch`` samples (the last may be smaller)."""
    total = next(iter(arrays.values())).shape[0]
    return [{k: np.ascontiguousarray(v[i:i + batch]) for k, v in arrays.items()} for i in range(0, total, batch)]


def save_npz(path: Path, arrays: Mapping[str, np.ndarray]) -> Path:
    """Write ``arrays`` as one ``.npz`` atomically (``compare --save-inputs/--save-outputs``)."""
    import io

    from trtforge.core.atomic import atomic_write_bytes

    buffer = io.BytesIO()
    np.savez(buffer, **{k: np.asarray(v) for k, v in arrays.items()})
    atomic_write_bytes(Path(path), buffer.getvalue())
    return Path(path)
