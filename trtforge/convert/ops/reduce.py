"""Reductions, softmax/log-softmax, top-k and arg-max/min. Which of them run in FP32 under FP16/BF16 is the FP32
plan's to say (``convert.fp32_plan``); ``lower_graph`` runs a kept node at FP32."""

from __future__ import annotations

import torch

from trtforge.convert.context import Context, example
from trtforge.convert.network import Tensor
from trtforge.convert.registry import converter


def _axes(x: Tensor, dims) -> tuple[int, ...]:
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return tuple(range(x.rank))
    dims = dims if isinstance(dims, (list, tuple)) else [dims]
    return tuple(sorted(d + x.rank if d < 0 else d for d in dims))


def _reduce(op: str, *, keep_arg: int | None = 2):
    def convert(ctx: Context, node, args):
        x = ctx.tensor(args[0], dtype=ctx.out_dtype(node))
        dtype = x.dtype
        if x.dtype == torch.bool:
            x = ctx.net.cast(x, torch.int32)
        keep = bool(args[keep_arg]) if keep_arg is not None and len(args) > keep_arg else False
        dims = args[1] if keep_arg is not None else None
        return ctx.net.cast(ctx.net.reduce(x, op, _axes(x, dims), keep), dtype)
    return convert


converter("aten.sum.dim_IntList")(_reduce("SUM"))
converter("aten.mean.dim")(_reduce("AVG"))
converter("aten.amax.default")(_reduce("MAX"))
converter("aten.amin.default")(_reduce("MIN"))
converter("aten.any.dim", "aten.any.dims")(_reduce("MAX"))
converter("aten.all.dim", "aten.all.dims")(_reduce("MIN"))
converter("aten.sum.default")(_reduce("SUM", keep_arg=None))
converter("aten.mean.default")(_reduce("AVG", keep_arg=None))
converter("aten.prod.dim_int")(_reduce("PROD"))
converter("aten.any.default")(_reduce("MAX", keep_arg=None))
converter("aten.all.default")(_reduce("MIN", keep_arg=None))
converter("aten.max.default")(_reduce("MAX", keep_arg=None))
converter("aten.min.default")(_reduce("MIN", keep_arg=None))


@converter("aten.var.correction")
def var(ctx: Context, node, args):
    x = ctx.tensor(args[0], dtype=ctx.out_dtype(node))
    dtype = ctx.out_dtype(node)
    axes = _axes(x, args[1])
    correction = 1 if args[2] is None else float(args[2])
    keep = bool(args[3])
    count = 1
    for a in axes:
        count *= x.shape[a]
    diff = ctx.net.elementwise(x, ctx.net.reduce(x, "AVG", axes, True), "SUB")
    total = ctx.net.reduce(ctx.net.elementwise(diff, diff, "PROD"), "SUM", axes, keep)
    out = ctx.net.elementwise(total, ctx.tensor(float(count - correction), like=total), "DIV")
    return ctx.net.cast(out, dtype)


def _softmax(log: bool):
    def convert(ctx: Context, node, args):
        x = ctx.tensor(args[0], dtype=ctx.out_dtype(node))
        dtype = x.dtype
        axis = args[1] + x.rank if args[1] < 0 else args[1]
        y = ctx.net.softmax(x, axis)
        return ctx.net.cast(ctx.net.unary(y, "LOG") if log else y, dtype)
    return convert


converter("aten._softmax.default", "aten.softmax.int")(_softmax(False))
converter("aten._log_softmax.default", "aten.log_softmax.int")(_softmax(True))


def _topk_ok(node) -> str | None:
    value = example(node.args[0])
    dim = node.args[2] if len(node.args) > 2 else -1
    if not isinstance(value.shape[dim], int):
        return "top-k along the dynamic dimension is not supported"
    k = node.args[1]
    if not isinstance(k, int) or k > 3840:
        return "k must be a constant ≤ 3840 (TensorRT's top-k limit)"
    return None


@converter("aten.topk.default", validator=_topk_ok)
def topk(ctx: Context, node, args):
    x, k, dim, largest = args[0], args[1], args[2], args[3]
    x = ctx.tensor(x)
    axis = dim + x.rank if dim < 0 else dim
    values, indices = ctx.net.topk(x, "MAX" if largest else "MIN", k, axis)
    return values, ctx.net.cast(indices, torch.int64)


def _arg(op: str):
    def convert(ctx: Context, node, args):
        x = ctx.tensor(args[0])
        if args[1] is None:
            x = ctx.reshape(x, [-1] if -1 not in x.shape else [-1])
        axis = 0 if args[1] is None else (args[1] + x.rank if args[1] < 0 else args[1])
        _, indices = ctx.net.topk(x, op, 1, axis)
        indices = ctx.net.cast(indices, torch.int64)
        if len(args) > 2 and args[2]:
            return indices
        return ctx.reshape(indices, [d for i, d in enumerate(ctx.dims(indices)) if i != axis])
    return convert


def _arg_ok(node) -> str | None:
    if len(node.args) < 2 or node.args[1] is None:
        return "arg-max/min over all elements is not supported; pass dim="
    return _topk_ok(type("N", (), {"args": (node.args[0], 1, node.args[1])})())


converter("aten.argmax.default", validator=_arg_ok)(_arg("MAX"))
converter("aten.argmin.default", validator=_arg_ok)(_arg("MIN"))


def _max_dim(op: str):
    def convert(ctx: Context, node, args):
        x = ctx.tensor(args[0])
        axis = args[1] + x.rank if args[1] < 0 else args[1]
        values, indices = ctx.net.topk(x, op, 1, axis)
        indices = ctx.net.cast(indices, torch.int64)
        if not (len(args) > 2 and args[2]):
            dims = [d for i, d in enumerate(ctx.dims(values)) if i != axis]
            values, indices = ctx.reshape(values, dims), ctx.reshape(indices, dims)
        return values, indices
    return convert


converter("aten.max.dim", validator=lambda n: _topk_ok(type("N", (), {"args": (n.args[0], 1, n.args[1])})()))(
    _max_dim("MAX"))
converter("aten.min.dim", validator=lambda n: _topk_ok(type("N", (), {"args": (n.args[0], 1, n.args[1])})()))(
    _max_dim("MIN"))


@converter("aten.linalg_vector_norm.default", validator=lambda n: None if (n.args[1] if len(n.args) > 1 else 2) in (
        1, 2, 1.0, 2.0) else "only the L1 and L2 vector norms are converted")
def vector_norm(ctx: Context, node, args):
    x = ctx.tensor(args[0], dtype=ctx.out_dtype(node))
    dtype = ctx.out_dtype(node)
    axes, keep = _axes(x, args[2]), bool(args[3])
    if float(args[1]) == 1.0:
        return ctx.net.cast(ctx.net.reduce(ctx.net.unary(x, "ABS"), "SUM", axes, keep), dtype)
    total = ctx.net.reduce(ctx.net.elementwise(x, x, "PROD"), "SUM", axes, keep)
    return ctx.net.cast(ctx.net.unary(total, "SQRT"), dtype)
