"""Matrix products: mm, bmm, addmm, baddbmm, matmul, linear."""

from __future__ import annotations

import torch

from trtforge.convert.context import Context, example
from trtforge.convert.int8 import activation_qdq, weight_qdq
from trtforge.convert.network import Tensor
from trtforge.convert.ops.elementwise import binary
from trtforge.convert.registry import converter


def _rank_two_plus(node) -> str | None:
    values = [example(a) for a in node.args[:2] if example(a) is not None]
    if any(v.dim() < 2 for v in values):
        return "vector operands (rank 1) are not supported; reshape to a matrix"
    return None


def product(ctx: Context, node, a, b, transpose_b: bool = False) -> Tensor:
    """``a @ b`` (``b`` transposed when asked); under INT8, when ``b`` is a constant weight of a quantized
    Linear module, ``a`` and ``b`` go through Q/DQ (``b`` per output feature: its last axis, or its
    second-to-last when transposed)."""
    dtype = ctx.out_dtype(node)
    quant = ctx.int8_scales(node) if isinstance(b, torch.Tensor) and b.dim() >= 2 else None
    if quant is None:
        return ctx.net.matmul(ctx.tensor(a, dtype=dtype), ctx.tensor(b, dtype=dtype), False, transpose_b)
    path, scales = quant
    ctx.int8_layers[path] = node.name
    x = activation_qdq(ctx.net, ctx.tensor(a, dtype=dtype), scales)
    weight = weight_qdq(ctx.net, b, scales, b.dim() - (2 if transpose_b else 1), dtype)
    return ctx.net.matmul(x, weight, False, transpose_b)


@converter("aten.mm.default", "aten.bmm.default", "aten.matmul.default", validator=_rank_two_plus)
def mm(ctx: Context, node, args):
    return product(ctx, node, args[0], args[1])


def _scaled_sum(ctx: Context, node, bias, prod: Tensor, beta, alpha) -> Tensor:
    if alpha != 1:
        prod = binary(ctx, node, prod, alpha, "PROD", prod.dtype)
    if beta == 0:
        return prod
    bias = ctx.tensor(bias, dtype=prod.dtype, like=prod)
    if beta != 1:
        bias = binary(ctx, node, bias, beta, "PROD", prod.dtype)
    return ctx.net.elementwise(prod, bias, "SUM")


@converter("aten.addmm.default", "aten.baddbmm.default", validator=lambda n: _rank_two_plus(
    type("N", (), {"args": n.args[1:3]})()))
def addmm(ctx: Context, node, args):
    bias, a, b, beta, alpha = args[:5]
    return _scaled_sum(ctx, node, bias, product(ctx, node, a, b), beta, alpha)


@converter("aten.linear.default", validator=_rank_two_plus)
def linear(ctx: Context, node, args):
    x, weight, bias = args[:3]
    out = product(ctx, node, x, weight, transpose_b=True)
    return out if bias is None else ctx.net.elementwise(out, ctx.tensor(bias, dtype=out.dtype, like=out), "SUM")
