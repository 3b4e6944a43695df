"""The preprocessing record: built from the sidecar's dict, refused with the fix, light to import."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from trtforge.core.errors import InvalidArgument, UserError
from trtforge.core.preprocessing import PreprocessConfig, PreprocessingRecordError
from trtforge.zoo.efficientnet_lite import LITE0_PREPROCESSING
from trtforge.zoo.photos import normalize, photo_crops


def test_record_from_the_sidecar_dict():
    config = PreprocessConfig.from_dict({**LITE0_PREPROCESSING, "interpolation": "Bicubic", "layout": "nhwc",
                                         "channel_order": "bgr", "unknown_key": 1})
    assert config == PreprocessConfig((224, 224), (0.485, 0.456, 0.406), (0.229, 0.224, 0.225), 1 / 255,
                                      "bicubic", False, "BGR", "NHWC")
    assert PreprocessConfig.of(config) is config


@pytest.mark.parametrize(("record", "fragment"), [
    ({"mean": [0.5] * 3}, "no 'resize'"),
    ({"resize": [224]}, "wrong kind"),
    ({"resize": [224, 224], "interpolation": "lanczos"}, "interpolation 'lanczos'"),
    ({"resize": [224, 224], "layout": "CHW"}, "layout 'CHW'"),
    ({"resize": [224, 224], "std": [0.2, 0.0, 0.2]}, "std non-zero"),
    ({"resize": [0, 224]}, "positive"),
], ids=["no-resize", "short-resize", "interpolation", "layout", "zero-std", "zero-size"])
def test_bad_records_refused_with_the_fix(record, fragment):
    with pytest.raises(PreprocessingRecordError, match="fix the record|add the model's input size|resize is") as info:
        PreprocessConfig.from_dict(record)
    assert fragment in str(info.value)
    assert isinstance(info.value, InvalidArgument) and isinstance(info.value, UserError)


def test_core_module_imports_torch_only_inside_functions():
    """``trtforge.load`` and ``trtforge inspect`` read records without importing torch."""
    path = Path(__file__).resolve().parents[2] / "trtforge" / "core" / "preprocessing.py"
    top = [n for n in ast.parse(path.read_text()).body if isinstance(n, (ast.Import, ast.ImportFrom))]
    names = {a.name for n in top if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module for n in top if isinstance(n, ast.ImportFrom)}
    assert not {n for n in names if n and n.split(".")[0] == "torch"}


def test_zoo_normalize_is_the_transform_at_model_size():
    """Crops already at 224²: no resize, so (x / 255 - mean) / std in float64 within float32 rounding."""
    crops = photo_crops(4, seed=3)
    ours = normalize(crops, LITE0_PREPROCESSING)
    mean, std = np.array(LITE0_PREPROCESSING["mean"]), np.array(LITE0_PREPROCESSING["std"])
    reference = ((crops / 255.0 - mean) / std).transpose(0, 3, 1, 2)
    assert ours.shape == (4, 3, 224, 224) and ours.dtype == np.float32
    np.testing.assert_allclose(ours, reference, rtol=0, atol=1e-6)
    with pytest.raises(TypeError, match="NHWC uint8"):
        normalize(crops.astype(np.float32), LITE0_PREPROCESSING)


def test_host_copy_equals_numpy_and_stage_reuses_one_growing_buffer():
    import numpy as np
    import torch

    from trtforge.vision.preprocess import Preprocessor, host_copy

    rng = np.random.default_rng(0)
    big = rng.integers(0, 256, (4, 480, 640, 3), dtype=np.uint8)
    out = np.empty_like(big)
    host_copy(out, big)
    np.testing.assert_array_equal(out, big)
    pre = Preprocessor(PreprocessConfig((8, 8)), torch.device("cpu"))
    staged = pre.stage(list(big[:2]))
    np.testing.assert_array_equal(staged.numpy(), big[:2])
    address = staged.data_ptr()
    assert pre.stage(big[:1]).data_ptr() == address  # a smaller batch: the same bytes
    assert pre.is_staged(pre.staged((2, 480, 640, 3)).numpy())
    np.testing.assert_array_equal(pre.stage(big).numpy(), big)  # grows once for the larger batch
