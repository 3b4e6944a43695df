"""Convolution, transposed convolution and pooling (max, average, adaptive average)."""

from __future__ import annotations

import torch

from trtforge.convert.context import Context, example, is_const
from trtforge.convert.int8 import activation_qdq, weight_qdq
from trtforge.convert.network import Tensor
from trtforge.convert.registry import Settings, converter


def _conv_ok(node, settings: Settings) -> str | None:
    x, weight = example(node.args[0]), node.args[1]
    if not is_const(weight) or (node.args[2] is not None and not is_const(node.args[2])):
        return "the weight and bias must be constants (parameters), not computed tensors"
    if x.dim() not in (3, 4, 5):
        return f"convolution of a rank-{x.dim()} input; TensorRT takes 1D (as 2D), 2D and 3D"
    if any(not isinstance(d, int) for d in x.shape[1:]):
        return "a dynamic channel or spatial dim is not supported (only the batch)"
    transposed, output_padding, padding = node.args[6], node.args[7], node.args[4]
    if transposed and any(o > p for o, p in zip(output_padding, padding, strict=True)):
        return "output_padding larger than padding needs negative post-padding"
    if transposed and settings.compute == torch.bfloat16:
        return ("TensorRT-RTX cannot build a BF16 transposed convolution (its weights must be tensors in BF16); "
                "convert with precision='fp16' or 'fp32'")
    return None


def _as_2d(ctx: Context, x: Tensor) -> Tensor:
    return ctx.reshape(x, ctx.dims(x)[:2] + [1, x.shape[2]])


@converter("aten.convolution.default", validator=_conv_ok)
def convolution(ctx: Context, node, args):
    x, weight, bias, stride, padding, dilation, transposed, output_padding, groups = args
    dtype = ctx.out_dtype(node)
    x = ctx.tensor(x, dtype=dtype)
    one_d = x.rank == 3
    if one_d:
        x, weight = _as_2d(ctx, x), weight.unsqueeze(2)
        stride, padding, dilation = (1, *stride), (0, *padding), (1, *dilation)
        output_padding = (0, *output_padding)
    post = [p - o for p, o in zip(padding, output_padding, strict=True)] if transposed else list(padding)
    quant = None if transposed else ctx.int8_scales(node)
    weight_input = None
    if quant is not None:  # INT8: input and weight through Q/DQ (per output channel: axis 0)
        x, weight_input = activation_qdq(ctx.net, x, quant[1]), weight_qdq(ctx.net, weight, quant[1], 0, dtype)
        ctx.int8_layers[quant[0]] = node.name
    out = ctx.net.convolution(
        x, weight.detach().to(dtype), None if bias is None else bias.detach().to(dtype), stride=stride,
        pre=padding, post=post, dilation=dilation, groups=groups, transposed=transposed, weight_input=weight_input)
    if one_d:
        dims = ctx.dims(out)
        out = ctx.reshape(out, dims[:2] + [dims[3]])
    return out


def _pool_ok(node) -> str | None:
    x = example(node.args[0])
    if x.dim() not in (4, 5) or any(not isinstance(d, int) for d in x.shape[1:]):
        return "pooling needs a 4D/5D input with static channel and spatial dims"
    return None


def _post_padding(node, x: Tensor, window, stride, padding) -> list[int]:
    """Post padding that yields the node's output size (covers ceil_mode)."""
    out = node.meta["val"]
    out = out[0] if isinstance(out, (tuple, list)) else out
    spatial = x.shape[2:]
    return [(o - 1) * s + k - n - p for o, s, k, n, p in zip(out.shape[2:], stride, window, spatial, padding,
                                                                strict=True)]


def _window(dims: int, args) -> tuple[list[int], list[int], list[int]]:
    """Kernel, stride (default: the kernel) and padding of a pooling op, one per spatial dim."""
    window = list(args[1]) * (dims // len(args[1]))
    stride = list(args[2] or window) * (dims // len(args[2] or window))
    padding = list(args[3]) * (dims // len(args[3]))
    return window, stride, padding


def _max_ok(node) -> str | None:
    dilation = node.args[4] if len(node.args) > 4 else [1]
    return _pool_ok(node) or ("dilated max pooling is not in TensorRT" if any(d != 1 for d in dilation) else None)


@converter("aten.max_pool2d_with_indices.default", "aten.max_pool3d_with_indices.default", "aten.max_pool2d.default",
           validator=_max_ok)
def max_pool(ctx: Context, node, args):
    x = ctx.tensor(args[0])
    window, stride, padding = _window(x.rank - 2, args)
    post = _post_padding(node, x, window, stride, padding)
    out = ctx.net.pooling(x, "MAX", window, stride=stride, pre=padding, post=post)
    return (out, None) if "with_indices" in str(node.target) else out


def _avg_ok(node) -> str | None:
    reason = _pool_ok(node)
    if reason:
        return reason
    divisor = node.args[6] if len(node.args) > 6 else None
    ceil_mode = node.args[4] if len(node.args) > 4 else False
    if divisor is not None:
        return "divisor_override has no TensorRT pooling equivalent"
    if ceil_mode:
        return "avg_pool with ceil_mode counts partial windows differently in TensorRT"
    return None


@converter("aten.avg_pool2d.default", "aten.avg_pool3d.default", validator=_avg_ok)
def avg_pool(ctx: Context, node, args):
    x = ctx.tensor(args[0])
    window, stride, padding = _window(x.rank - 2, args)
    include_pad = args[5]
    return ctx.net.pooling(x, "AVERAGE", window, stride=stride, pre=padding, post=padding,
                           exclude_padding=not include_pad)


def _adaptive_ok(node) -> str | None:
    reason = _pool_ok(node)
    if reason:
        return reason
    spatial, out = example(node.args[0]).shape[2:], node.args[1]
    if any(n % o for n, o in zip(spatial, out, strict=True)):
        return f"adaptive pooling {tuple(spatial)} → {tuple(out)} has uneven windows"
    return None


@converter("aten._adaptive_avg_pool2d.default", "aten._adaptive_avg_pool3d.default", "aten.adaptive_avg_pool2d.default",
           validator=_adaptive_ok)
def adaptive_avg_pool(ctx: Context, node, args):
    x = ctx.tensor(args[0])
    window = [n // o for n, o in zip(x.shape[2:], args[1], strict=True)]
    zeros = [0] * len(window)
    if all(o == 1 for o in args[1]):
        return ctx.net.reduce(x, "AVG", tuple(range(2, x.rank)), True)
    return ctx.net.pooling(x, "AVERAGE", window, stride=window, pre=zeros, post=zeros)

