"""Shape ops: view/reshape, permute, cat, slice, select, gather/index, expand, squeeze/unsqueeze, pad,
flatten, split, flip, roll, repeat, fills; and the SymInt arithmetic of a dynamic batch."""

from __future__ import annotations

import operator

import torch

from trtforge.convert.context import Context, ConversionRefused, SymDim, example
from trtforge.convert.network import Tensor
from trtforge.convert.registry import converter

BIG = 2**62


def _axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


@converter("aten.sym_size.int")
def sym_size(ctx: Context, node, args):
    x = ctx.tensor(args[0])
    return ctx.size_of(x, _axis(args[1], x.rank))


def _sym_math(op: str):
    def convert(ctx: Context, node, args):
        a, b = args
        if not isinstance(a, SymDim) and not isinstance(b, SymDim):
            return {"SUM": operator.add, "SUB": operator.sub, "PROD": operator.mul,
                    "FLOOR_DIV": operator.floordiv}[op](a, b)
        return SymDim(ctx.net.elementwise(ctx.dim(a), ctx.dim(b), op))
    return convert


converter("_operator.mul")(_sym_math("PROD"))
converter("_operator.add")(_sym_math("SUM"))
converter("_operator.sub")(_sym_math("SUB"))
converter("_operator.floordiv")(_sym_math("FLOOR_DIV"))


@converter("_operator.getitem")
def getitem(ctx: Context, node, args):
    value = args[0][args[1]]
    if value is None:
        raise ConversionRefused(f"output {args[1]} of {node.args[0]} is not produced by its converter")
    return value


def _no_zero_dims(node) -> str | None:
    sizes = node.args[1]
    if any(isinstance(s, int) and s == 0 for s in sizes):
        return "a 0 in the target shape (empty tensors) is not supported"
    return None


@converter("aten.view.default", "aten._unsafe_view.default", "aten.reshape.default", validator=_no_zero_dims)
def view(ctx: Context, node, args):
    return ctx.reshape(ctx.tensor(args[0]), list(args[1]))


@converter("aten.permute.default")
def permute(ctx: Context, node, args):
    x = ctx.tensor(args[0])
    return ctx.net.shuffle(x, first=tuple(_axis(a, x.rank) for a in args[1]))


@converter("aten.transpose.int")
def transpose(ctx: Context, node, args):
    x = ctx.tensor(args[0])
    perm = list(range(x.rank))
    a, b = _axis(args[1], x.rank), _axis(args[2], x.rank)
    perm[a], perm[b] = perm[b], perm[a]
    return ctx.net.shuffle(x, first=tuple(perm))


@converter("aten.t.default")
def t(ctx: Context, node, args):
    x = ctx.tensor(args[0])
    return x if x.rank < 2 else ctx.net.shuffle(x, first=(1, 0))


@converter("aten.cat.default")
def cat(ctx: Context, node, args):
    dtype = ctx.out_dtype(node)
    parts = [ctx.tensor(v, dtype=dtype) for v in args[0]]
    parts = [p for p in parts if not (p.rank == 1 and p.shape[0] == 0)]
    return ctx.net.concat(parts, _axis(args[1], parts[0].rank))


def _static_dim(node, axis_arg: int) -> str | None:
    value = example(node.args[0])
    axis = node.args[axis_arg] if len(node.args) > axis_arg else 0
    if not isinstance(value.shape[axis], int):
        return f"slicing or indexing the dynamic dimension {axis} is not supported"
    return None


def _slice_axis(ctx: Context, x: Tensor, axis: int, start: int, size: int, step: int, mode="STRICT_BOUNDS") -> Tensor:
    dims = ctx.dims(x)
    dims[axis] = size
    starts = [0] * x.rank
    starts[axis] = start
    strides = [1] * x.rank
    strides[axis] = step
    return ctx.net.slice(x, tuple(starts), ctx.sizes(dims), tuple(strides), mode=mode)


@converter("aten.slice.Tensor", validator=lambda n: None if len(n.args) < 3 and not n.kwargs else _static_dim(n, 1))
def slice_(ctx: Context, node, args):
    x = ctx.tensor(args[0])
    axis = _axis(args[1], x.rank)
    n = x.shape[axis]
    if n < 0:
        return x  # the whole dynamic dim (validator allows only that)
    start, end, step = args[2] if args[2] is not None else 0, args[3] if args[3] is not None else BIG, args[4]
    start, end, step = slice(start, end, step).indices(n)
    size = max(0, -(-(end - start) // step))
    if (start, size, step) == (0, n, 1):
        return x
    return _slice_axis(ctx, x, axis, start, size, step)


@converter("aten.select.int", validator=lambda n: _static_dim(n, 1))
def select(ctx: Context, node, args):
    x = ctx.tensor(args[0])
    axis = _axis(args[1], x.rank)
    index = args[2] + x.shape[axis] if args[2] < 0 else args[2]
    return ctx.net.gather(x, ctx.tensor(torch.tensor(index, dtype=torch.int64)), axis)


def _indices(ctx: Context, index, n: int) -> Tensor:
    """An INT64 index tensor with negative entries wrapped (TensorRT's gather takes 0 ≤ i < n)."""
    if isinstance(index, torch.Tensor):
        return ctx.tensor(torch.where(index < 0, index + n, index).to(torch.int64))
    index = ctx.tensor(index, dtype=torch.int64)
    negative = ctx.net.elementwise(index, ctx.tensor(0, dtype=torch.int64, like=index), "LESS")
    wrapped = ctx.net.elementwise(index, ctx.tensor(n, dtype=torch.int64, like=index), "SUM")
    return ctx.net.select(negative, wrapped, index)


def _index_ok(node) -> str | None:
    """Advanced indices must sit on consecutive axes; all but the first indexed axis static."""
    indices = node.args[1]
    used = [i for i, v in enumerate(indices) if v is not None]
    if used != list(range(used[0], used[-1] + 1)):
        return "advanced indices separated by slices move axes; not supported"
    if any(example(indices[i]) is not None and example(indices[i]).dtype == torch.bool for i in used):
        return "boolean-mask indexing makes a data-dependent shape"
    shape = example(node.args[0]).shape
    if any(not isinstance(shape[i], int) for i in used[1:]):
        return "only the first indexed dimension may be dynamic"
    return None


def _times(ctx: Context, a, b):
    if isinstance(a, int) and isinstance(b, int):
        return a * b
    return SymDim(ctx.net.elementwise(ctx.dim(a), ctx.dim(b), "PROD"))


@converter("aten.index.Tensor", validator=_index_ok)
def index(ctx: Context, node, args):
    """x[..., i0, i1, ...] on consecutive axes: merge those axes and gather the flat index
    i0 * d1 * ... + i1 * ... (elementwise broadcasting gives torch's broadcast of the indices)."""
    x = ctx.tensor(args[0])
    used = [i for i, v in enumerate(args[1]) if v is not None]
    dims = ctx.dims(x)
    flat = None
    for axis in used:
        n = dims[axis]
        idx = _indices(ctx, args[1][axis], n) if isinstance(n, int) else ctx.tensor(args[1][axis], dtype=torch.int64)
        if flat is None:
            flat = idx
            continue
        flat, idx = ctx.net.same_rank(flat, idx)
        flat = ctx.net.elementwise(ctx.net.elementwise(flat, ctx.tensor(n, dtype=torch.int64, like=flat), "PROD"),
                                   idx, "SUM")
    merged = dims[used[0]]
    for axis in used[1:]:
        merged = _times(ctx, merged, dims[axis])
    if len(used) > 1:
        x = ctx.reshape(x, dims[:used[0]] + [merged] + dims[used[-1] + 1:])
    return ctx.net.gather(x, flat, used[0])


@converter("aten.index_select.default", validator=lambda n: _static_dim(n, 1))
def index_select(ctx: Context, node, args):
    x = ctx.tensor(args[0])
    axis = _axis(args[1], x.rank)
    return ctx.net.gather(x, _indices(ctx, args[2], x.shape[axis]), axis)


@converter("aten.embedding.default")
def embedding(ctx: Context, node, args):
    weight = ctx.tensor(args[0])
    return ctx.net.gather(weight, _indices(ctx, args[1], weight.shape[0]), 0)


@converter("aten.expand.default")
def expand(ctx: Context, node, args):
    x = ctx.tensor(args[0])
    sizes = list(args[1])
    x = ctx.net.unsqueeze_front(x, len(sizes))
    current = ctx.dims(x)
    dims = [current[i] if (isinstance(s, int) and s == -1) else s for i, s in enumerate(sizes)]
    return ctx.broadcast(x, dims)


def _reshape_to_node(ctx: Context, node, x: Tensor) -> Tensor:
    """Reshape ``x`` to the node's example shape (its one symbolic dim, if any, read from ``x``)."""
    dims, dynamic = [], ctx.dims(x)
    dynamic = [d for d in dynamic if isinstance(d, SymDim)]
    for d in node.meta["val"].shape:
        if isinstance(d, int):
            dims.append(d)
        elif len(dynamic) == 1:
            dims.append(dynamic[0])
        else:
            raise ConversionRefused("a reshape with several dynamic dims is not supported")
    return ctx.reshape(x, dims)


@converter("aten.squeeze.dims", "aten.squeeze.dim", "aten.squeeze.default", "aten.unsqueeze.default",
           "aten.flatten.using_ints")
def squeeze_unsqueeze(ctx: Context, node, args):
    return _reshape_to_node(ctx, node, ctx.tensor(args[0]))


def _pads(x: Tensor, pad) -> tuple[list[int], list[int]]:
    """torch's pad list (last dim first, (before, after) pairs) → per-axis pre and post."""
    pre, post = [0] * x.rank, [0] * x.rank
    for i in range(len(pad) // 2):
        pre[x.rank - 1 - i], post[x.rank - 1 - i] = pad[2 * i], pad[2 * i + 1]
    return pre, post


def _pad(mode: str):
    def convert(ctx: Context, node, args):
        x = ctx.tensor(args[0])
        pre, post = _pads(x, args[1])
        dims = ctx.dims(x)
        sizes = [d + pre[i] + post[i] if pre[i] or post[i] else d for i, d in enumerate(dims)]
        fill = ctx.tensor(float(args[2]) if len(args) > 2 and args[2] else 0.0, dtype=x.dtype) \
            if mode == "FILL" else None
        return ctx.net.slice(x, tuple(-p for p in pre), ctx.sizes(sizes), (1,) * x.rank, mode=mode, fill=fill)
    return convert


def _static_pads(node) -> str | None:
    value, pad = example(node.args[0]), node.args[1]
    rank = value.dim()
    if any(not isinstance(value.shape[rank - 1 - i], int) for i in range(len(pad) // 2)):
        return "padding the dynamic dimension is not supported"
    return None


converter("aten.constant_pad_nd.default", validator=_static_pads)(_pad("FILL"))
for _n in (1, 2, 3):
    converter(f"aten.reflection_pad{_n}d.default", validator=_static_pads)(_pad("REFLECT"))
    converter(f"aten.replication_pad{_n}d.default", validator=_static_pads)(_pad("CLAMP"))


@converter("aten.split_with_sizes.default", "aten.split.Tensor", validator=lambda n: _static_dim(n, 2))
def split(ctx: Context, node, args):
    x = ctx.tensor(args[0])
    axis = _axis(args[2], x.rank)
    n = x.shape[axis]
    sizes = args[1] if isinstance(args[1], (list, tuple)) else [min(args[1], n - s) for s in range(0, n, args[1])]
    parts, start = [], 0
    for size in sizes:
        parts.append(_slice_axis(ctx, x, axis, start, size, 1))
        start += size
    return parts


@converter("aten.unbind.int", validator=lambda n: _static_dim(n, 1))
def unbind(ctx: Context, node, args):
    x = ctx.tensor(args[0])
    axis = _axis(args[1], x.rank)
    return [ctx.net.gather(x, ctx.tensor(torch.tensor(i, dtype=torch.int64)), axis) for i in range(x.shape[axis])]


def _static_dims(node) -> str | None:
    value = example(node.args[0])
    dims = node.args[2] if "roll" in str(node.target) else node.args[1]
    if any(not isinstance(value.shape[d], int) for d in dims):
        return "flipping or rolling the dynamic dimension is not supported"
    return None


@converter("aten.flip.default", validator=_static_dims)
def flip(ctx: Context, node, args):
    x = ctx.tensor(args[0])
    for axis in (_axis(a, x.rank) for a in args[1]):
        x = _slice_axis(ctx, x, axis, x.shape[axis] - 1, x.shape[axis], -1)
    return x


@converter("aten.roll.default", validator=lambda n: "roll needs explicit dims" if not n.args[2] else _static_dims(n))
def roll(ctx: Context, node, args):
    """out[i] = x[(i - shift) mod n]: a WRAP-mode slice starting at -shift."""
    x = ctx.tensor(args[0])
    for shift, axis in zip(args[1], (_axis(a, x.rank) for a in args[2]), strict=True):
        x = _slice_axis(ctx, x, axis, (-shift) % x.shape[axis], x.shape[axis], 1, mode="WRAP")
    return x


@converter("aten.repeat.default")
def repeat(ctx: Context, node, args):
    """out[i] = x[i mod n] along each axis: a WRAP-mode slice of size n * r."""
    x = ctx.net.unsqueeze_front(ctx.tensor(args[0]), len(args[1]))
    dims = ctx.dims(x)
    sizes = [d if r == 1 else (d * r if isinstance(d, int) else None) for d, r in zip(dims, args[1], strict=True)]
    if any(s is None for s in sizes):
        raise ConversionRefused("repeating the dynamic dimension is not supported")
    return ctx.net.slice(x, (0,) * x.rank, ctx.sizes(sizes), (1,) * x.rank, mode="WRAP")


def _fill(ctx: Context, node, dims, value) -> Tensor:
    dtype = ctx.out_dtype(node)
    return ctx.broadcast(ctx.tensor(torch.tensor(value, dtype=dtype).reshape((1,) * len(dims))), dims)


@converter("aten.full.default")
def full(ctx: Context, node, args):
    return _fill(ctx, node, list(args[0]), args[1])


@converter("aten.full_like.default", "aten.zeros_like.default", "aten.ones_like.default")
def full_like(ctx: Context, node, args):
    value = {"zeros_like": 0, "ones_like": 1}.get(node.target.__name__.split(".")[0], None)
    x = ctx.tensor(args[0])
    return _fill(ctx, node, ctx.dims(x), args[1] if value is None else value)


@converter("aten._assert_tensor_metadata.default", "aten._assert_scalar.default", "aten.sym_constrain_range.default",
           "aten.sym_constrain_range_for_size.default", "aten._assert_async.msg")
def export_check(ctx: Context, node, args):
    """Checks torch.export inserts; the engine's profile and shapes already enforce them."""
    return None


@converter("aten.arange.start_step", "aten.arange.default", "aten.arange.start")
def arange(ctx: Context, node, args):
    """A dynamic arange (its end is a symbolic size): a LINSPACE fill of ceil((end - start) / step)."""
    if "start_step" in str(node.target) or str(node.target).endswith(".start"):
        start, end, step = args[0], args[1], args[2] if "start_step" in str(node.target) else 1
    else:
        start, end, step = 0, args[0], 1
    if not isinstance(start, int) or not isinstance(step, int) or step <= 0:
        raise ConversionRefused("a dynamic arange needs integer start and a positive integer step")
    count = ctx.net.elementwise(ctx.dim(end), ctx.dim(start + 1 - step), "SUB")
    count = ctx.net.elementwise(count, ctx.dim(step), "FLOOR_DIV")
    return ctx.net.linspace(count, start, step, ctx.out_dtype(node))


@converter("aten.gather.default", validator=lambda n: _static_dim(n, 1))
def gather_elements(ctx: Context, node, args):
    """torch.gather: TensorRT's gather in ELEMENT mode (same-rank indices)."""
    x = ctx.tensor(args[0])
    axis = _axis(args[1], x.rank)
    return ctx.net.gather(x, _indices(ctx, args[2], x.shape[axis]), axis, mode="ELEMENT")
