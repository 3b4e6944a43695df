"""trtforge: PyTorch and ONNX models → TensorRT engines, and a fast way to run them."""

from trtforge._version import __version__

__all__ = ["__version__"]
