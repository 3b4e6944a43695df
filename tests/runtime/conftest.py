"""Shared fixtures for the runtime tests: the real EfficientNet-Lite0, a photo, sidecars."""

from __future__ import annotations

import sys
from pathlib import Path

# The TensorRT double lives beside these tests; make it importable as ``trt_double``.
sys.path.insert(0, str(Path(__file__).parent))
