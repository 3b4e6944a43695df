"""The one FP32 rule set: which ops stay FP32 under FP16/BF16, and why, as data both paths read.

Op kinds are ONNX op type names (``LayerNormalization``, ``ReduceMean``, ``Div``, ...). The ONNX path's float pass
(``passes.float16``, ``passes.range_probe``) applies these rules to onnx_ir nodes; the direct path
(``convert.fp32_plan``) maps each FX node's ATen op to the same op kinds and applies the same rules. Every reason
is written by the functions below, ``"{op kind}: {what the rule says}"``, so the same op kept by the same rule
reads the same in either path's sidecar.

Example:
    >>> fragile_reason("ReduceProd")
    'ReduceProd: products overflow FP16 after a few dozen factors'
    >>> range_reason("Softmax", "float16", 3e5)
    'Softmax: range probe: |x| reaches 3e+05, over 16376 (float16 max / 4)'
"""

from __future__ import annotations

import numpy as np

#: Normalisations: their reductions overflow or lose precision in FP16.
NORMALIZATION_OPS = frozenset(
    {"LayerNormalization", "GroupNormalization", "InstanceNormalization", "RMSNormalization",
     "LpNormalization", "SimplifiedLayerNormalization", "MeanVarianceNormalization"}
)
#: Reductions that, when they feed a square root or reciprocal, form a hand-written normalisation.
NORM_REDUCTIONS = frozenset({"ReduceMean", "ReduceSum", "ReduceSumSquare", "ReduceL2"})
NORM_FINISHERS = frozenset({"Sqrt", "Reciprocal"})
#: How many nodes downstream of a reduction the walk to its Sqrt/Reciprocal looks.
NORM_HOPS = 5
#: Ops whose FP16 results break on ordinary inputs, whatever the probe saw: op → why. (FP16 only.)
RANGE_FRAGILE_OPS: dict[str, str] = {
    "ReduceProd": "products overflow FP16 after a few dozen factors",
    "Mod": "FP16 keeps 11 bits, so a remainder of a large dividend loses most of its digits",
    "Tan": "near ±π/2 FP16's input rounding is magnified without bound",
}
#: Ops whose second operand, when computed (not a constant), takes their result past FP16's range on
#: inputs the range probe never saw: op → why. (FP16 only; ``--keep-fp32`` adds more, the rule stays.)
COMPUTED_OPERAND_OPS: dict[str, str] = {
    "Div": "by a computed divisor; one near 0 takes the quotient past FP16's 65504 (inf)",
    "Pow": "with a computed exponent; x**y leaves FP16's range for ordinary x and y",
}
#: A Div feeding one of these is a floor division: FP16 rounding of the quotient flips the integer.
ROUNDING_OPS = frozenset({"Floor", "Ceil", "Round"})
FLOOR_DIVISION_REASON = "Div: a floor division; FP16 rounding of the quotient flips its integer part"

FP16_MAX = 65504.0
FP16_TINY = 2.0**-24  # smallest FP16 subnormal; smaller non-zero constants flush to 0
SMALL_CONSTANT = 16  # constants up to this many elements are scalars/epsilons, checked for underflow

#: The range probe. The low type's largest finite value.
LOW_MAX: dict[str, float] = {"float16": 65504.0, "bfloat16": 3.3895313892515355e38}
#: A probed magnitude must stay below LOW_MAX / HEADROOM for its node to run in the low type.
HEADROOM = 4.0
#: FP16 rounds a softmax input of magnitude 32 by up to 1/64: exp() of that is a 1.6 % error.
SOFTMAX_INPUT_BOUND: dict[str, float] = {"float16": 32.0, "bfloat16": 4.0}
SOFTMAX_OPS = frozenset({"Softmax", "LogSoftmax"})

#: The rules about FP16's range (fragile ops, computed operands, out-of-range constants): BF16 has FP32's range
#: and skips them.
FP16_RANGE_RULES = frozenset({"range_fragile", "out_of_range_constant"})


def normalization_reason(op: str) -> str:
    return f"{op}: normalisation reductions lose precision in FP16"


def fragile_reason(op: str) -> str:
    return f"{op}: {RANGE_FRAGILE_OPS[op]}"


def computed_operand_reason(op: str) -> str:
    return f"{op}: {COMPUTED_OPERAND_OPS[op]}"


def rounding_of_quotient_reason(op: str) -> str:
    return f"{op}: of a quotient; FP16 rounding flips its integer part"


def norm_path_reason(op: str, reduction: str, finisher: str) -> str:
    """``op`` lies on the path from ``reduction`` to ``finisher`` (a hand-written normalisation)."""
    return f"{op}: part of a normalisation ({reduction} → {finisher})"


def constant_reason(op: str, arr: np.ndarray) -> str | None:
    """Why a float32 constant read by ``op`` cannot be FP16 (past its max, or flushed to 0), or None."""
    if arr.dtype != np.float32 or arr.size == 0:
        return None
    finite = arr[np.isfinite(arr)]
    if finite.size == 0:
        return None
    big = float(np.abs(finite).max())
    if big > FP16_MAX:
        return f"{op}: constant with |x| = {big:.3g} > FP16 max {FP16_MAX:g}"
    # Underflow matters for scalars such as a normalisation epsilon, or when every value would
    # flush to zero; a weight tensor losing a few tiny entries keeps its numbers.
    nonzero = np.abs(finite[finite != 0])
    if nonzero.size and float(nonzero.max()) < FP16_TINY:
        return f"{op}: constant with all |x| < FP16 subnormal min {FP16_TINY:.3g}"
    if nonzero.size and arr.size <= SMALL_CONSTANT and float(nonzero.min()) < FP16_TINY:
        return f"{op}: constant with |x| = {float(nonzero.min()):.3g} < FP16 subnormal min {FP16_TINY:.3g}"
    return None


def range_limit(dtype: str) -> float:
    """The largest magnitude the range probe lets a node run with in ``dtype``."""
    return LOW_MAX[dtype] / HEADROOM


def range_reason(op: str, dtype: str, seen: float) -> str | None:
    """The range probe's reason when a value ``op`` reads or writes reaches ``seen``, or None."""
    limit = range_limit(dtype)
    if seen <= limit:
        return None
    return f"{op}: range probe: |x| reaches {seen:.2g}, over {limit:.6g} ({dtype} max / {HEADROOM:g})"


def softmax_reason(op: str, dtype: str, seen: float) -> str | None:
    """The range probe's reason when a softmax's input reaches ``seen`` (FP16 spacing there rounds exp away)."""
    bound = SOFTMAX_INPUT_BOUND[dtype]
    if op not in SOFTMAX_OPS or seen <= bound:
        return None
    return f"{op}: range probe: input reaches {seen:.2g}, over {bound:g} ({dtype} rounds exp away)"
