"""The debug tests' fixture: an artifact the TensorRT double runs, with a real reference ONNX beside it."""

from __future__ import annotations

from pathlib import Path

import pytest
from debug_models import double_artifact


@pytest.fixture
def fake_artifact(tmp_path) -> Path:
    return double_artifact(tmp_path / "good")
