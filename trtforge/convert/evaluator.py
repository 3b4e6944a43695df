"""The reference evaluator: executes a recorded network with torch on the CPU, layer by layer, with
TensorRT's documented semantics for every layer kind the converters emit.

No GPU here runs TensorRT engines, so this is how the converters' numerics are tested: the record
holds exactly what TensorRT was given (the same network builds with TensorRT-RTX), and each layer
below follows the TensorRT API reference for that layer (shuffle's 0-placeholder, slice sample
modes, asymmetric pre/post padding, resize coordinate transformations, ...), never a call to the
PyTorch op that a converter lowers.

Example:
    >>> outputs = evaluate(network.record, {"x": torch.randn(2, 4)})
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from trtforge.convert.network import Layer, Record
from trtforge.core.errors import InternalError, InvalidArgument

Evaluator = Callable[[dict, list], list]


def _same_rank(*tensors: torch.Tensor) -> None:
    if len({t.dim() for t in tensors}) != 1:
        raise InternalError(f"TensorRT broadcasts only equal ranks: {[tuple(t.shape) for t in tensors]}")


def _elementwise(attrs: dict, ins: list) -> list:
    a, b = ins
    _same_rank(a, b)
    op = attrs["op"]
    integer = not a.dtype.is_floating_point and a.dtype != torch.bool
    table: dict[str, Callable] = {
        "SUM": torch.add, "SUB": torch.sub, "PROD": torch.mul, "MAX": torch.maximum, "MIN": torch.minimum,
        "POW": torch.pow, "EQUAL": torch.eq, "GREATER": torch.gt, "LESS": torch.lt,
        "AND": torch.logical_and, "OR": torch.logical_or, "XOR": torch.logical_xor,
        "DIV": (lambda x, y: torch.div(x, y, rounding_mode="trunc")) if integer else torch.div,
        "FLOOR_DIV": lambda x, y: torch.div(x, y, rounding_mode="floor"),
    }
    return [table[op](a, b)]


UNARY: dict[str, Callable] = {
    "EXP": torch.exp, "LOG": torch.log, "SQRT": torch.sqrt, "RECIP": torch.reciprocal, "ABS": torch.abs,
    "NEG": torch.neg, "SIN": torch.sin, "COS": torch.cos, "TAN": torch.tan, "SINH": torch.sinh,
    "COSH": torch.cosh, "ASIN": torch.asin, "ACOS": torch.acos, "ATAN": torch.atan, "ASINH": torch.asinh,
    "ACOSH": torch.acosh, "ATANH": torch.atanh, "CEIL": torch.ceil, "FLOOR": torch.floor, "ERF": torch.erf,
    "NOT": torch.logical_not, "SIGN": torch.sign, "ROUND": torch.round, "ISINF": torch.isinf,
    "ISNAN": torch.isnan,
}


def _activation(attrs: dict, ins: list) -> list:
    """The formulas of TensorRT's ActivationType documentation."""
    x, a, b = ins[0], attrs["alpha"], attrs["beta"]
    op = attrs["op"]
    zero = torch.zeros_like(x)
    formulas: dict[str, Callable[[], torch.Tensor]] = {
        "RELU": lambda: torch.maximum(x, zero),
        "SIGMOID": lambda: 1 / (1 + torch.exp(-x)),
        "TANH": lambda: torch.tanh(x),
        "LEAKY_RELU": lambda: torch.where(x >= 0, x, a * x),
        "ELU": lambda: torch.where(x >= 0, x, a * (torch.exp(x) - 1)),
        "SELU": lambda: b * torch.where(x > 0, x, a * (torch.exp(x) - 1)),
        "SOFTSIGN": lambda: x / (1 + x.abs()),
        "SOFTPLUS": lambda: a * torch.log(torch.exp(b * x) + 1),
        "CLIP": lambda: torch.clamp(x, a, b),
        "HARD_SIGMOID": lambda: torch.clamp(a * x + b, 0, 1),
        "SCALED_TANH": lambda: a * torch.tanh(b * x),
        "THRESHOLDED_RELU": lambda: torch.where(x > a, x, zero),
        "GELU_ERF": lambda: 0.5 * x * (1 + torch.erf(x / math.sqrt(2))),
        "GELU_TANH": lambda: 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))),
    }
    return [formulas[op]().to(x.dtype)]


def _shuffle(attrs: dict, ins: list) -> list:
    """First transpose, then reshape (0 copies the input's dim at that index, -1 is inferred), then second."""
    x, shape = ins
    if attrs["first"] is not None:
        x = x.permute(*attrs["first"])
    dims = [int(d) for d in shape.tolist()] if shape is not None else attrs["reshape"]
    if dims is not None:
        if shape is None:
            dims = [x.shape[i] if d == 0 else d for i, d in enumerate(dims)]
        x = x.reshape(dims)
    if attrs["second"] is not None:
        x = x.permute(*attrs["second"])
    return [x.contiguous()]


def _reflect(index: torch.Tensor, n: int) -> torch.Tensor:
    if n == 1:
        return torch.zeros_like(index)
    period = 2 * (n - 1)
    index = torch.remainder(index, period)
    return torch.where(index >= n, period - index, index)


def _slice(attrs: dict, ins: list) -> list:
    """Output index i on axis d reads start[d] + i * stride[d]; out-of-range reads follow the mode."""
    x, start_t, size_t, stride_t, fill = ins
    start = start_t.tolist() if start_t is not None else attrs["start"]
    size = size_t.tolist() if size_t is not None else attrs["size"]
    stride = stride_t.tolist() if stride_t is not None else attrs["stride"]
    mode = attrs["mode"]
    valid = torch.ones((), dtype=torch.bool)
    out = x
    for axis in range(x.dim()):
        n = x.shape[axis]
        index = start[axis] + torch.arange(size[axis]) * stride[axis]
        inside = (index >= 0) & (index < n)
        if mode == "STRICT_BOUNDS" and not bool(inside.all()):
            raise InternalError(f"slice out of bounds on axis {axis}: {index.tolist()} of {n}")
        if mode == "WRAP":
            index = torch.remainder(index, n)
        elif mode == "REFLECT":
            index = _reflect(index, n)
        else:
            index = index.clamp(0, max(n - 1, 0))
        out = out.index_select(axis, index) if n else out.new_zeros(out.shape[:axis] + (len(index),))
        view = [1] * x.dim()
        view[axis] = len(index)
        valid = valid & inside.reshape(view)
    if mode == "FILL":
        value = fill.reshape(()) if fill is not None else torch.zeros((), dtype=x.dtype)
        out = torch.where(valid, out, value.to(x.dtype))
    return [out]


def _gather(attrs: dict, ins: list) -> list:
    x, indices = ins
    axis = attrs["axis"]
    if attrs["mode"] == "ELEMENT":
        _same_rank(x, indices)
        return [torch.gather(x, axis, indices.long())]
    if indices.numel() and (int(indices.min()) < 0 or int(indices.max()) >= x.shape[axis]):
        raise InternalError(f"gather index out of range for axis {axis} of size {x.shape[axis]}")
    out = x.index_select(axis, indices.reshape(-1).long())
    return [out.reshape(x.shape[:axis] + indices.shape + x.shape[axis + 1:])]


def _matmul(attrs: dict, ins: list) -> list:
    a, b = ins
    _same_rank(a, b)
    a = a.transpose(-1, -2) if attrs["transpose_a"] else a
    b = b.transpose(-1, -2) if attrs["transpose_b"] else b
    return [torch.matmul(a, b)]


def _reduce(attrs: dict, ins: list) -> list:
    x, axes, keep = ins[0], list(attrs["axes"]), attrs["keep"]
    ops: dict[str, Callable] = {
        "SUM": lambda: x.sum(axes, keepdim=keep), "AVG": lambda: x.mean(axes, keepdim=keep),
        "MAX": lambda: x.amax(axes, keepdim=keep), "MIN": lambda: x.amin(axes, keepdim=keep),
        "PROD": lambda: _prod(x, axes, keep),
    }
    return [ops[attrs["op"]]().to(x.dtype)]


def _prod(x: torch.Tensor, axes: list[int], keep: bool) -> torch.Tensor:
    for axis in sorted(axes, reverse=True):
        x = x.prod(axis, keepdim=keep)
    return x


def _topk(attrs: dict, ins: list) -> list:
    values, indices = torch.topk(ins[0], attrs["k"], dim=attrs["axis"], largest=attrs["op"] == "MAX", sorted=True)
    return [values, indices.to(torch.int32)]


def _conv(attrs: dict, ins: list) -> list:
    """Explicit pre/post zero padding, then the cross-correlation of the convolution layer."""
    x, dims = ins[0], len(attrs["pre"])
    pad = [p for pair in zip(reversed(attrs["pre"]), reversed(attrs["post"]), strict=True) for p in pair]
    fn = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[dims]
    weight = (attrs["weight"] if attrs["weight"] is not None else ins[1]).to(x.dtype)
    bias = None if attrs["bias"] is None else attrs["bias"].to(x.dtype)
    return [fn(F.pad(x, pad), weight, bias, attrs["stride"], 0, attrs["dilation"], attrs["groups"])]


def _per_axis(scale: torch.Tensor, x: torch.Tensor, axis: int) -> torch.Tensor:
    """A 0-d scale as it is; a 1-D scale shaped to broadcast along ``axis`` of ``x``."""
    if scale.dim() == 0:
        return scale
    return scale.reshape([-1 if i == axis else 1 for i in range(x.dim())])


def _quantize(attrs: dict, ins: list) -> list:
    """IQuantizeLayer to INT8: round half to even of x / scale (computed in FP32), clamped to [-128, 127]."""
    x, scale = ins
    q = torch.round(x.float() / _per_axis(scale, x, attrs["axis"]).float())
    return [q.clamp(-128, 127).to(torch.int8)]


def _dequantize(attrs: dict, ins: list) -> list:
    """IDequantizeLayer: the INT8 values times the scale, in the scale's dtype."""
    q, scale = ins
    return [(q.float() * _per_axis(scale, q, attrs["axis"]).float()).to(scale.dtype)]


def _deconv(attrs: dict, ins: list) -> list:
    """The full transposed convolution, then pre/post padding crop the output (TensorRT's definition)."""
    x, dims = ins[0], len(attrs["pre"])
    fn = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}[dims]
    weight = attrs["weight"].to(x.dtype)
    bias = None if attrs["bias"] is None else attrs["bias"].to(x.dtype)
    out = fn(x, weight, bias, attrs["stride"], 0, 0, attrs["groups"], attrs["dilation"])
    index = [slice(None), slice(None)]
    index += [slice(p, out.shape[2 + i] - q) for i, (p, q) in enumerate(zip(attrs["pre"], attrs["post"], strict=True))]
    return [out[tuple(index)]]


def _pooling(attrs: dict, ins: list) -> list:
    x, window, stride = ins[0], attrs["window"], attrs["stride"]
    pad = [p for pair in zip(reversed(attrs["pre"]), reversed(attrs["post"]), strict=True) for p in pair]
    dims = len(window)
    if attrs["op"] == "MAX":
        padded = F.pad(x, pad, value=-math.inf)
        return [{1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}[dims](padded, window, stride)]
    avg = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}[dims]
    total = avg(F.pad(x, pad), window, stride) * math.prod(window)
    if attrs["exclude_padding"]:
        ones = F.pad(torch.ones((1, 1) + x.shape[2:], dtype=x.dtype), pad)
        count = avg(ones, window, stride) * math.prod(window)
        return [total / count]
    return [total / math.prod(window)]


def _normalization(attrs: dict, ins: list) -> list:
    """Y = (X - mean(X, axes)) / sqrt(var(X, axes) + epsilon) * scale + bias (biased variance)."""
    x, scale, bias = ins
    axes = list(attrs["axes"])
    mean = x.mean(axes, keepdim=True)
    var = ((x - mean) ** 2).mean(axes, keepdim=True)
    return [((x - mean) / torch.sqrt(var + attrs["eps"]) * scale + bias).to(x.dtype)]


def _taps(mode: str, coord: torch.Tensor, n: int, cubic: float) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Source indices (clamped to the edge) and weights for one axis."""
    if mode == "NEAREST":
        return [coord.long().clamp(0, n - 1)], [torch.ones_like(coord)]
    base = torch.floor(coord)
    t = coord - base
    if mode == "LINEAR":
        offsets, weights = (0, 1), [1 - t, t]
    else:
        a = cubic

        def w(d):
            d = d.abs()
            return torch.where(d <= 1, (a + 2) * d**3 - (a + 3) * d**2 + 1,
                               torch.where(d < 2, a * d**3 - 5 * a * d**2 + 8 * a * d - 4 * a, torch.zeros_like(d)))

        offsets, weights = (-1, 0, 1, 2), [w(t + 1), w(t), w(1 - t), w(2 - t)]
    return [(base.long() + o).clamp(0, n - 1) for o in offsets], weights


def _source_coords(attrs: dict, out_len: int, n: int, scale: float) -> torch.Tensor:
    i = torch.arange(out_len, dtype=torch.float64)
    coords = attrs["coords"]
    if coords == "HALF_PIXEL":
        c = (i + 0.5) / scale - 0.5
    elif coords == "ASYMMETRIC":
        c = i / scale
    else:
        c = i * (n - 1) / (out_len - 1) if out_len > 1 else torch.zeros_like(i)
    if attrs["mode"] == "NEAREST":
        rounding = {"FLOOR": torch.floor, "CEIL": torch.ceil, "HALF_UP": lambda v: torch.floor(v + 0.5),
                    "HALF_DOWN": lambda v: torch.ceil(v - 0.5)}[attrs["rounding"]]
        c = rounding(c)
    return c


def _resize(attrs: dict, ins: list) -> list:
    """Separable resize: per axis, output index → source coordinate (the coordinate transformation),
    then nearest rounding, linear or cubic taps; the output length is floor(input * scale)."""
    x = ins[0]
    out = x.double()
    for axis, scale in enumerate(attrs["scales"]):
        n = x.shape[axis]
        out_len = int(math.floor(n * scale))
        if scale == 1 and out_len == n:
            continue
        coord = _source_coords(attrs, out_len, n, scale)
        indices, weights = _taps(attrs["mode"], coord, n, attrs["cubic_coeff"])
        view = [1] * x.dim()
        view[axis] = out_len
        out = sum(out.index_select(axis, idx) * w.reshape(view) for idx, w in zip(indices, weights, strict=True))
    return [out.to(x.dtype)]


def _grid_sample(attrs: dict, ins: list) -> list:
    """Bilinear sampling at grid (x, y) in [-1, 1]; FILL reads zeros outside, CLAMP the border."""
    x, grid = ins
    n, c, h, w = x.shape
    gx, gy = grid[..., 0].double(), grid[..., 1].double()
    if attrs["align_corners"]:
        px, py = (gx + 1) / 2 * (w - 1), (gy + 1) / 2 * (h - 1)
    else:
        px, py = ((gx + 1) * w - 1) / 2, ((gy + 1) * h - 1) / 2
    if attrs["sample_mode"] == "CLAMP":
        px, py = px.clamp(0, w - 1), py.clamp(0, h - 1)
    x0, y0 = torch.floor(px), torch.floor(py)
    flat = x.double().reshape(n, c, h * w)
    out = torch.zeros((n, c) + tuple(gx.shape[1:]), dtype=torch.float64)
    for dx, dy in ((0, 0), (1, 0), (0, 1), (1, 1)):
        xi, yi = x0 + dx, y0 + dy
        weight = (1 - (px - xi).abs()) * (1 - (py - yi).abs())
        inside = (xi >= 0) & (xi < w) & (yi >= 0) & (yi < h)
        index = (yi.clamp(0, h - 1) * w + xi.clamp(0, w - 1)).long().reshape(n, 1, -1).expand(n, c, -1)
        values = flat.gather(2, index).reshape(out.shape)
        out += values * (weight * inside).unsqueeze(1)
    return [out.to(x.dtype)]


#: Layer kind → its TensorRT semantics on torch tensors (inputs in record order, None = unset).
EVALUATORS: dict[str, Evaluator] = {
    "constant": lambda attrs, ins: [attrs["value"]],
    "identity": lambda attrs, ins: [ins[0]],
    "elementwise": _elementwise,
    "unary": lambda attrs, ins: [UNARY[attrs["op"]](ins[0])],
    "activation": _activation,
    "cast": lambda attrs, ins: [ins[0].to(attrs["dtype"])],
    "shuffle": _shuffle,
    "concatenation": lambda attrs, ins: [torch.cat(ins, attrs["axis"])],
    "slice": _slice,
    "gather": _gather,
    "matrix_multiply": _matmul,
    "reduce": _reduce,
    "softmax": lambda attrs, ins: [torch.softmax(ins[0].float(), attrs["axis"]).to(ins[0].dtype)],
    "topk": _topk,
    "select": lambda attrs, ins: [torch.where(ins[0], ins[1], ins[2])],
    "shape": lambda attrs, ins: [torch.tensor(ins[0].shape, dtype=torch.int64)],
    "quantize": _quantize,
    "dequantize": _dequantize,
    "convolution": _conv,
    "deconvolution": _deconv,
    "pooling": _pooling,
    "normalization": _normalization,
    "resize": _resize,
    "grid_sample": _grid_sample,
    "fill": lambda attrs, ins: [(ins[1] + ins[2] * torch.arange(int(ins[0][0]), dtype=ins[2].dtype)).to(attrs["dtype"])],
}


def evaluate(record: Record, feeds: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    """Run ``record`` on ``feeds`` (input name → tensor); returns the outputs in order."""
    env: dict[str, torch.Tensor] = {}
    for name, dtype, shape in record.inputs:
        if name not in feeds:
            raise InvalidArgument(f"missing input {name!r}; pass feeds={{{name!r}: tensor}}")
        value = feeds[name]
        if value.dtype != dtype or value.dim() != len(shape) or any(
                s not in (-1, v) for s, v in zip(shape, value.shape, strict=True)):
            raise InvalidArgument(f"input {name!r} is {value.dtype}{tuple(value.shape)}, the network takes "
                                  f"{dtype}{shape} (-1 = any); pass a matching tensor")
        env[name] = value
    for layer in record.layers:
        _run(layer, env)
    return [env[name] for name in record.outputs]


def _run(layer: Layer, env: dict[str, torch.Tensor]) -> None:
    ins = [None if name is None else env[name] for name in layer.inputs]
    outs = EVALUATORS[layer.kind](layer.attrs, ins)
    for name, value in zip(layer.outputs, outs, strict=True):
        env[name] = value
