"""The one registry of op kinds that passes, quantize and the reports classify graphs by.

Example:
    >>> "Conv" in MAC_OPS, "DequantizeLinear" in QDQ_OPS
    (True, True)
"""

from __future__ import annotations

from trtforge.core.fp32_rules import NORMALIZATION_OPS  # the FP32 rule set defines it; classified by here too

#: Multiply-accumulate ops: what the quantizer may run in INT8, and what MAC counts add up.
MAC_OPS = frozenset({"Conv", "ConvTranspose", "MatMul", "Gemm"})
#: Ops that make a graph quantized (the float pass refuses such graphs; dtype summaries count them).
QDQ_OPS = frozenset({"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear"})
#: Ops that only move or reshape data; walking through them keeps "the same tensor".
SHAPE_OPS = frozenset({"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Cast"})
#: Element-wise nonlinearities (an MLP has one between its two projections).
NONLINEAR_OPS = frozenset({"Relu", "Gelu", "Erf", "Tanh", "Sigmoid", "Clip", "HardSwish", "HardSigmoid",
                           "LeakyRelu", "Softplus", "Mish", "Elu", "Selu", "FastGelu", "QuickGelu"})


def op_kind(op_type: str) -> str | None:
    """The registry's name for ``op_type``: "mac", "qdq", "shape", "normalization", "nonlinear" or None.

    Example:
        >>> op_kind("Gemm"), op_kind("Add")
        ('mac', None)
    """
    for kind, ops in OP_KINDS.items():
        if op_type in ops:
            return kind
    return None


OP_KINDS: dict[str, frozenset[str]] = {
    "mac": MAC_OPS, "qdq": QDQ_OPS, "shape": SHAPE_OPS, "normalization": NORMALIZATION_OPS,
    "nonlinear": NONLINEAR_OPS,
}
