"""Serving on Triton Inference Server: ``trtforge.serve(...)`` and Triton model-repository export.

The ``tritonserver`` binary and its Python backend come from the ``nvidia-pytriton`` wheel; each
artifact becomes a Python-backend model whose stub process runs the engine through a trtforge route
(``trtforge.load``). This module stays light: the heavy parts import when called.

Example:
    >>> with trtforge.serve(["out/mlp_fp16.json"], route="onnxruntime") as server:
    ...     server.endpoints["grpc"]
    '127.0.0.1:8001'
"""

from trtforge.serve.server import Server, serve

__all__ = ["Server", "serve"]
