"""scaled_dot_product_attention, decomposed: softmax(q kᵀ · scale + mask) v; a boolean mask becomes a bias of 0 and
``MASK_FILL`` (as torch.onnx writes it), computed in FP32 and the softmax too where the FP32 plan says.

TensorRT-RTX refuses fused attention at FP32, so the decomposition is always emitted; TensorRT fuses
the pattern itself where the precision allows.
"""

from __future__ import annotations

import math

import torch

from trtforge.convert.context import Context, example
from trtforge.convert.fp32_plan import MASK_FILL
from trtforge.convert.registry import converter


def _sdpa_ok(node) -> str | None:
    args = list(node.args) + [None] * 8
    dropout = node.kwargs.get("dropout_p", args[4] or 0.0)
    causal = node.kwargs.get("is_causal", args[5] or False)
    if dropout:
        return "dropout_p > 0 is training-only"
    if node.kwargs.get("enable_gqa", args[7] or False):
        return "enable_gqa (grouped-query attention) is not converted"
    q, k = example(node.args[0]), example(node.args[1])
    if causal and any(not isinstance(d, int) for d in (q.shape[-2], k.shape[-2])):
        return "a causal mask needs static sequence lengths"
    return None


@converter("aten.scaled_dot_product_attention.default", validator=_sdpa_ok)
def sdpa(ctx: Context, node, args):
    q, k, v, mask, _dropout, causal, scale = args[:7]
    dtype = ctx.out_dtype(node)
    q, k, v = (ctx.tensor(t, dtype=dtype) for t in (q, k, v))
    scale = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    if ctx.keeps(node, "softmax"):  # the FP32 plan's range probe: the scores leave the low type's range
        q, k = ctx.net.cast(q, torch.float32), ctx.net.cast(k, torch.float32)
    scores = ctx.net.matmul(q, k, False, True)
    scores = ctx.net.elementwise(scores, ctx.tensor(float(scale), like=scores), "PROD")
    if causal:
        length, source = q.shape[-2], k.shape[-2]
        keep = torch.ones(length, source, dtype=torch.bool).tril()
        mask = torch.zeros(length, source).masked_fill(~keep, float("-inf"))
    if mask is not None:
        if (example(node.args[3]) is not None and example(node.args[3]).dtype == torch.bool) or (
                isinstance(mask, torch.Tensor) and mask.dtype == torch.bool):
            bias_dtype = torch.float32 if ctx.keeps(node, "mask") else scores.dtype  # FP16 holds no MASK_FILL
            zero, fill = ctx.tensor(0.0, dtype=bias_dtype, like=scores), ctx.tensor(MASK_FILL, dtype=bias_dtype,
                                                                                  like=scores)
            bias = ctx.net.select(ctx.tensor(mask, dtype=torch.bool), zero, fill)
            scores = ctx.net.elementwise(scores, ctx.net.cast(bias, scores.dtype), "SUM")
        else:
            scores = ctx.net.elementwise(scores, ctx.tensor(mask, dtype=scores.dtype, like=scores), "SUM")
    probs = ctx.net.cast(ctx.net.softmax(scores, scores.rank - 1), dtype)
    return ctx.net.matmul(probs, v)
