"""trtforge: PyTorch and ONNX models → TensorRT engines, and a fast way to run them.

The public names load on first use, so ``import trtforge`` (and ``trtforge --help``) stays cheap:
``trtforge.load`` never imports torch, onnx or the compile stack.

Example:
    >>> import torch, trtforge
    >>> from trtforge.zoo import efficientnet_lite0
    >>> art = trtforge.compile(efficientnet_lite0(), (torch.zeros(1, 3, 224, 224),), precision="fp16")
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from trtforge._version import __version__

if TYPE_CHECKING:
    from trtforge.artifact import Artifact
    from trtforge.convert.registry import converter
    from trtforge.core.config import CompileConfig, QuantConfig
    from trtforge.core.postprocess import NMS
    from trtforge.pipeline import compile  # noqa: A004 - the public verb
    from trtforge.runtime.load import load
    from trtforge.serve import serve
    from trtforge.tuning import tune

#: Public name → the module that defines it.
_LAZY: dict[str, str] = {
    "Artifact": "trtforge.artifact",
    "CompileConfig": "trtforge.core.config",
    "QuantConfig": "trtforge.core.config",
    "NMS": "trtforge.core.postprocess",
    "compile": "trtforge.pipeline",
    "converter": "trtforge.convert.registry",
    "serve": "trtforge.serve",
    "load": "trtforge.runtime.load",
    "tune": "trtforge.tuning",
}

__all__ = ["NMS", "Artifact", "CompileConfig", "QuantConfig", "__version__", "compile", "converter", "load", "serve", "tune"]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'trtforge' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
