"""Fixtures for the runtime tests: real photos, a Lite0 sidecar (``lite0`` comes from tests/conftest.py)."""

from __future__ import annotations

import sys
from pathlib import Path

# The TensorRT double lives beside these tests; make it importable as ``trt_double``.
sys.path.insert(0, str(Path(__file__).parent))

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from trtforge.core.sidecar import Sidecar, sha256_file, write_sidecar  # noqa: E402
from trtforge.core.specs import TensorSpec  # noqa: E402

LITE0_PROFILE = {"images": {"min": [1, 3, 224, 224], "opt": [4, 3, 224, 224], "max": [8, 3, 224, 224]}}


@pytest.fixture(scope="session")
def photo_batch() -> np.ndarray:
    """Two real photos (skimage) as the predictor preprocesses them for Lite0: (2, 3, 224, 224) float32."""
    from skimage import data

    from trtforge.core.preprocessing import PreprocessConfig, preprocess_images
    from trtforge.zoo.efficientnet_lite import LITE0_PREPROCESSING

    config = PreprocessConfig.from_dict(LITE0_PREPROCESSING)
    return np.ascontiguousarray(preprocess_images([data.chelsea(), data.astronaut()], config).numpy())


@pytest.fixture(scope="session")
def lite0_sidecar(tmp_path_factory, lite0) -> Path:
    """A sidecar for EfficientNet-Lite0 as the pipeline writes it: FP32 reference ONNX, zoo factory.

    The engine file is a placeholder: no TensorRT engine can run on this machine, and these tests
    exercise the PyTorch and ONNX Runtime routes, which never read it.
    """
    from trtforge.zoo.efficientnet_lite import LITE0_PREPROCESSING

    folder = tmp_path_factory.mktemp("lite0")
    onnx_path = folder / "efficientnet_lite0_fp32.onnx"
    torch.onnx.export(
        lite0, (torch.zeros(1, 3, 224, 224),), str(onnx_path), dynamo=False, input_names=["images"],
        output_names=["logits"], dynamic_axes={"images": {0: "batch"}, "logits": {0: "batch"}},
    )
    engine = folder / "efficientnet_lite0_fp16.engine"
    engine.write_bytes(b"placeholder, not a TensorRT engine")
    sidecar = Sidecar(
        name="efficientnet_lite0_fp16", engine_file=engine.name, engine_size=engine.stat().st_size,
        engine_sha256=sha256_file(engine),
        inputs=(TensorSpec("images", "float32", (-1, 3, 224, 224)),),
        outputs=(TensorSpec("logits", "float32", (-1, 1000)),),
        profiles=(LITE0_PROFILE,), precision={"built": "fp16"}, builder={"flavour": "tensorrt_rtx"},
        source={"kind": "torch", "onnx_file": onnx_path.name, "reference_onnx_file": onnx_path.name,
                "factory": "trtforge.zoo:efficientnet_lite0"},
        preprocessing=dict(LITE0_PREPROCESSING),
    )
    return write_sidecar(folder / "efficientnet_lite0_fp16.json", sidecar)
