"""Inputs the hardening suite shares: the tiny model (two weight sets), one finished build, calibration arrays."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from tiny_model import export_tiny

import trtforge


@pytest.fixture(scope="session")
def hardening_inputs(tmp_path_factory, tiny_onnx) -> dict[str, Path]:
    """Files every case copies from: tiny.onnx, tiny_seed1.onnx, calib.npy and ``art/`` (a build of tiny)."""
    root = tmp_path_factory.mktemp("hardening_inputs")
    shutil.copy(tiny_onnx, root / "tiny.onnx")
    export_tiny(root / "tiny_seed1.onnx", seed=1)
    np.save(root / "calib.npy", np.random.default_rng(0).standard_normal((24, 3, 16, 16)).astype(np.float32))
    trtforge.compile(root / "tiny.onnx", output_dir=root / "art", cache_dir=root / "cache", progress=False)
    return {"tiny": root / "tiny.onnx", "tiny_seed1": root / "tiny_seed1.onnx", "calib": root / "calib.npy",
            "art": root / "art", "cache": root / "cache"}
