"""ONNX translations trtforge gives torch.onnx's dynamo exporter for ops whose own lowering is too big.

``aten._adaptive_avg_pool2d`` has no ONNX translation in torch.onnx, so the exporter runs torch's
decomposition: one Gather and one Add per element of the largest pooling window. An
``AdaptiveAvgPool2d(3)`` on a 224×224 input became an 11,636-node graph that onnxscript's optimizer
took minutes over. Here, with static spatial dims, the op is an ``AveragePool`` where the output size
divides the input size, and otherwise two ``MatMul`` with constant averaging matrices
(``y = P_h · x · P_wᵀ``, row ``i`` of ``P`` averaging PyTorch's window ``[⌊i·n/o⌋, ⌈(i+1)·n/o⌉)``):
two nodes, whatever the size.

Example:
    >>> torch.onnx.export(model, args, dynamo=True, custom_translation_table=translation_table())
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from trtforge.core.errors import Unsupported


class DynamicPoolingInput(Unsupported):
    """Adaptive pooling over a spatial dim that is dynamic: the averaging windows are not known."""


def pool_matrix(size: int, out: int) -> np.ndarray:
    """The ``out × size`` matrix whose row ``i`` averages PyTorch's adaptive window ``i`` of ``size`` values.

    Example:
        >>> pool_matrix(4, 3)      # windows [0, 2), [1, 3), [2, 4)
        array([[0.5, 0.5, 0. , 0. ],
               [0. , 0.5, 0.5, 0. ],
               [0. , 0. , 0.5, 0.5]])
    """
    matrix = np.zeros((out, size), np.float64)
    for i in range(out):
        start, end = (i * size) // out, -(-(i + 1) * size // out)
        matrix[i, start:end] = 1.0 / (end - start)
    return matrix


def adaptive_avg_pool2d(self: Any, output_size: Sequence[int]) -> Any:
    """``aten._adaptive_avg_pool2d(self, output_size)`` in ONNX (traced by the exporter; see the module doc)."""
    import onnx_ir as ir
    from onnxscript import opset18 as op

    height, width = self.shape[-2], self.shape[-1]
    if not (isinstance(height, int) and isinstance(width, int)):
        raise DynamicPoolingInput(
            f"adaptive_avg_pool2d over dynamic spatial dims {list(self.shape)}: the pooling windows need a fixed "
            "height and width; export with static spatial dims (only the batch dynamic)")
    out_h, out_w = (int(d) for d in output_size)
    if len(self.shape) == 4 and height % out_h == 0 and width % out_w == 0:
        kernel = [height // out_h, width // out_w]
        return op.AveragePool(self, kernel_shape=kernel, strides=kernel)
    dtype = self.dtype.numpy()
    rows = op.Constant(value=ir.tensor(pool_matrix(height, out_h).astype(dtype)))
    columns = op.Constant(value=ir.tensor(pool_matrix(width, out_w).T.astype(dtype)))
    return op.MatMul(rows, op.MatMul(self, columns))


def translation_table() -> dict[Callable, Callable]:
    """``custom_translation_table`` for ``torch.onnx.export(..., dynamo=True)``: aten overload → translation."""
    import torch

    return {torch.ops.aten._adaptive_avg_pool2d.default: adaptive_avg_pool2d,
            torch.ops.aten.adaptive_avg_pool2d.default: adaptive_avg_pool2d}
