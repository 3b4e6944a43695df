"""Runtime: one ``Engine`` protocol over TensorRT, PyTorch and ONNX Runtime routes.

Example:
    >>> from trtforge.runtime import load
    >>> with load("out/efficientnet_lite0_fp16.engine", route="onnxruntime") as engine:
    ...     out = engine(np.zeros((1, 3, 224, 224), np.float32))
"""

from trtforge.core.routes import ROUTE_NAMES, ROUTES
from trtforge.runtime.load import load
from trtforge.runtime.protocol import (
    CapturableEngine,
    Engine,
    EngineBase,
    EngineClosedError,
    EngineInputError,
)

__all__ = ["ROUTES", "ROUTE_NAMES", "CapturableEngine", "Engine", "EngineBase", "EngineClosedError", "EngineInputError", "load"]
