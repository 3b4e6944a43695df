"""Shared fixtures: a tiny real model exported once per session, compiled with real TensorRT-RTX builds."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))

from tiny_model import TinyNet, export_tiny  # noqa: E402

from trtforge.core import trt  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line("markers", "needs_trt: builds real engines with the installed TensorRT bindings")


def pytest_collection_modifyitems(items):
    if not trt.available():
        skip = pytest.mark.skip(reason="no TensorRT bindings installed")
        for item in items:
            if "needs_trt" in item.keywords:
                item.add_marker(skip)


@pytest.fixture(scope="session")
def tiny_onnx(tmp_path_factory) -> Path:
    """The tiny model as an ONNX file (exported once)."""
    return export_tiny(tmp_path_factory.mktemp("tiny") / "tiny.onnx")


@pytest.fixture
def tiny_module() -> TinyNet:
    torch.manual_seed(0)
    return TinyNet().eval()


@pytest.fixture(autouse=True)
def _quiet_logs_and_private_cache(caplog, monkeypatch, tmp_path):
    """INFO logs captured; a test that forgets cache_dir= still never touches ~/.cache."""
    caplog.set_level(logging.INFO, logger="trtforge")
    monkeypatch.setenv("TRTFORGE_CACHE_DIR", str(tmp_path / "default-cache"))
    yield
