"""Batch norm (inference), layer norm and group norm. Under FP16/BF16 the FP32 plan (``convert.fp32_plan``) keeps
layer and group norm in FP32: ``lower_graph`` runs them at FP32."""

from __future__ import annotations

import torch

from trtforge.convert.context import Context, example, is_const
from trtforge.convert.registry import converter


def _consts(*indices: int):
    def validate(node) -> str | None:
        if any(i < len(node.args) and node.args[i] is not None and not is_const(node.args[i]) for i in indices):
            return "the affine weights and statistics must be constants"
        if any(not isinstance(d, int) for d in example(node.args[0]).shape[1:]):
            return "only the batch dim may be dynamic"
        return None
    return validate


@converter("aten._native_batch_norm_legit_no_training.default", validator=_consts(1, 2, 3, 4))
def batch_norm(ctx: Context, node, args):
    """Inference batch norm folded to x * scale + shift with per-channel constants."""
    x, weight, bias, mean, var, _momentum, eps = args[:7]
    channels = mean.shape[0]
    scale = (weight if weight is not None else torch.ones(channels)) / torch.sqrt(var.double() + eps)
    shift = (bias if bias is not None else torch.zeros(channels)) - mean * scale
    x = ctx.tensor(x, dtype=ctx.out_dtype(node))
    view = (1, channels) + (1,) * (x.rank - 2)
    y = ctx.net.elementwise(x, ctx.tensor(scale.float().reshape(view), dtype=x.dtype), "PROD")
    return ctx.net.elementwise(y, ctx.tensor(shift.float().reshape(view), dtype=x.dtype), "SUM"), None, None


@converter("aten.native_layer_norm.default", validator=_consts(2, 3))
def layer_norm(ctx: Context, node, args):
    x, shape, weight, bias, eps = args[:5]
    x = ctx.tensor(x, dtype=ctx.out_dtype(node))
    dtype = x.dtype
    view = (1,) * (x.rank - len(shape)) + tuple(shape)
    scale = (weight if weight is not None else torch.ones(shape)).float().reshape(view)
    shift = (bias if bias is not None else torch.zeros(shape)).float().reshape(view)
    axes = tuple(range(x.rank - len(shape), x.rank))
    y = ctx.net.normalization(x, ctx.tensor(scale, dtype=x.dtype), ctx.tensor(shift, dtype=x.dtype), axes, float(eps))
    return ctx.net.cast(y, dtype), None, None


@converter("aten.native_group_norm.default", validator=_consts(1, 2))
def group_norm(ctx: Context, node, args):
    """Reshape to (N, G, C/G * HW), normalise the last axis, reshape back, then the per-channel affine."""
    x, weight, bias, _n, channels, _hw, groups, eps = args[:8]
    x = ctx.tensor(x, dtype=ctx.out_dtype(node))
    dtype = x.dtype
    dims = ctx.dims(x)
    inner = (channels // groups) * int(torch.tensor(x.shape[2:]).prod())
    grouped = ctx.reshape(x, [dims[0], groups, inner])
    ones = ctx.tensor(torch.ones(1, 1, 1), dtype=grouped.dtype)
    zeros = ctx.tensor(torch.zeros(1, 1, 1), dtype=grouped.dtype)
    y = ctx.net.cast(ctx.net.normalization(grouped, ones, zeros, (2,), float(eps)), dtype)
    y = ctx.reshape(y, dims)
    view = (1, channels) + (1,) * (x.rank - 2)
    if weight is not None:
        y = ctx.net.elementwise(y, ctx.tensor(weight.reshape(view), dtype=dtype), "PROD")
    if bias is not None:
        y = ctx.net.elementwise(y, ctx.tensor(bias.reshape(view), dtype=dtype), "SUM")
    return y, None, None
