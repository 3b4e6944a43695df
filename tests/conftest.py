"""Shared, session-scoped real models and data (exported once per test run)."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
import torch

from trtforge.capture.export import export_onnx
from trtforge.passes.cleanup import cleanup
from trtforge.passes.graph import load_ir, save_model

logging.getLogger("torch.onnx").setLevel(logging.ERROR)


@pytest.fixture(scope="session", autouse=True)
def _isolated_engine_cache(tmp_path_factory):
    """Tests never read or write the user's ~/.cache/trtforge: one fresh engine cache per run."""
    import os

    previous = os.environ.get("TRTFORGE_CACHE_DIR")
    os.environ["TRTFORGE_CACHE_DIR"] = str(tmp_path_factory.mktemp("engine_cache"))
    yield
    if previous is None:
        os.environ.pop("TRTFORGE_CACHE_DIR", None)
    else:
        os.environ["TRTFORGE_CACHE_DIR"] = previous


@pytest.fixture(scope="session")
def lite0():
    from trtforge.zoo import efficientnet_lite0

    return efficientnet_lite0()


@pytest.fixture(scope="session")
def lite0_onnx(lite0, tmp_path_factory) -> Path:
    """EfficientNet-Lite0 (real weights) exported with a dynamic batch and cleaned: the FP32 reference."""
    tmp = tmp_path_factory.mktemp("lite0")
    raw = export_onnx(lite0, (torch.zeros(1, 3, 224, 224),), tmp / "raw.onnx",
                      input_names=["images"], output_names=["logits"])
    path = tmp / "efficientnet_lite0.onnx"
    save_model(cleanup(load_ir(raw)), path)
    return path


@pytest.fixture(scope="session")
def photo_inputs(lite0) -> np.ndarray:
    """128 real-photo crops from skimage, normalised for EfficientNet-Lite0 (N, 3, 224, 224)."""
    from trtforge.zoo.photos import normalize, photo_crops

    return normalize(photo_crops(128, seed=1), lite0.preprocessing)


@pytest.fixture(scope="session")
def minilm():
    from trtforge.zoo import minilm_l6

    return minilm_l6()


@pytest.fixture(scope="session")
def minilm_onnx(minilm, tmp_path_factory) -> Path:
    model, tokenize = minilm
    tmp = tmp_path_factory.mktemp("minilm")
    raw = export_onnx(model, tokenize(["warm up sentence"] * 2, seq_len=32), tmp / "raw.onnx")
    path = tmp / "minilm.onnx"
    save_model(cleanup(load_ir(raw)), path)
    return path


@pytest.fixture(scope="session")
def sentences() -> list[str]:
    """Real English sentences that ship with Python (pydoc help topics)."""
    from trtforge.zoo.texts import sentences as python_sentences

    return python_sentences(48)
