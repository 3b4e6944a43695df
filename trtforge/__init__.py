"""trtforge: PyTorch and ONNX models → TensorRT engines, and a fast way to run them.

Example:
    >>> import torch, trtforge
    >>> from trtforge.zoo import efficientnet_lite0
    >>> art = trtforge.compile(efficientnet_lite0(), (torch.zeros(1, 3, 224, 224),), precision="fp16")
"""

from trtforge._version import __version__
from trtforge.artifact import Artifact
from trtforge.builder.config import BuildConfig
from trtforge.pipeline import compile  # noqa: A004 - the public verb
from trtforge.runtime.load import load
from trtforge.serve import serve

__all__ = ["Artifact", "BuildConfig", "__version__", "compile", "load", "serve"]
