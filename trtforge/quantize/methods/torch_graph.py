"""An onnx_ir graph evaluated in PyTorch with autograd: ``TorchGraph`` (for quantization-aware fine-tuning).

Each node runs as the torch function of its ONNX op (``OPS``, a table: one entry per op), on the graph's
own tensor names, so a ``QuantPlan`` (layers addressed by their first output tensor, inputs by index)
applies as it is: ``TorchGraph.forward(feeds, inputs=...)`` lets the caller replace any node input just
before the node reads it (``trtforge.quantize.methods.distill`` puts fake quantization there). Initializers
named in ``trainable`` are ``torch.nn.Parameter`` objects holding the value in units of the tensor given there
(``value = param · unit``; Adam's step is then a share of that unit); the rest are constant tensors.

Why a small interpreter and not a library: nothing in trtforge evaluates an ONNX graph in torch (the
direct path's ``module_quantizer`` hooks ``nn.Module`` objects, which the ONNX path no longer has), and the
converters on PyPI (``onnx2torch``, last release 2024-08, not installed) rebuild an ``fx.GraphModule``
whose module and node names are not the ONNX tensor names the plan addresses, and would add a
dependency. The ops the issue's models use are a few dozen lines of ``torch.nn.functional``; an op
outside ``OPS`` is refused in one line before any work (``unsupported_ops``). The tests check the
interpreter against ONNX Runtime on the FP32 graph.

Example:
    >>> graph = TorchGraph(model, trainable={"conv.weight": torch.tensor(1.0)})
    >>> (logits,) = graph.forward({"images": torch.zeros(1, 3, 224, 224)})
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import onnx_ir as ir
import torch
import torch.nn.functional as F  # noqa: N812

from trtforge.passes.graph import attr

Op = Callable[[ir.Node, list], object]


def _ints(x) -> list[int]:
    return [int(v) for v in (x.tolist() if isinstance(x, torch.Tensor) else x)]


def _pads(node: ir.Node, rank: int) -> tuple[list[int], list[int]]:
    if attr(node, "auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
        raise NotImplementedError(f"{node.op_type} {node.name!r}: auto_pad={attr(node, 'auto_pad')}")
    pads = list(attr(node, "pads", [0] * (2 * rank)))
    return pads[:rank], pads[rank:]


def _padded(x, node: ir.Node, rank: int, value: float = 0.0):
    """``x`` padded explicitly by the node's ``pads`` (torch's own padding is symmetric only)."""
    begin, end = _pads(node, rank)
    if not any(begin) and not any(end):
        return x
    return F.pad(x, [p for d in reversed(range(rank)) for p in (begin[d], end[d])], value=value)


def _conv(node: ir.Node, xs):
    x, w = xs[0], xs[1]
    rank = w.dim() - 2
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[rank]
    bias = xs[2] if len(xs) > 2 else None
    return conv(_padded(x, node, rank), w, bias, _ints(attr(node, "strides", [1] * rank)), 0,
                _ints(attr(node, "dilations", [1] * rank)), attr(node, "group", 1))


def _pool(node: ir.Node, xs):
    rank = xs[0].dim() - 2
    kernel, strides = _ints(attr(node, "kernel_shape")), _ints(attr(node, "strides", [1] * rank))
    if node.op_type == "MaxPool":
        pool = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}[rank]
        return pool(_padded(xs[0], node, rank, float("-inf")), kernel, strides, 0,
                    ceil_mode=bool(attr(node, "ceil_mode", 0)))
    begin, end = _pads(node, rank)
    pool = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}[rank]
    if begin == end:
        return pool(xs[0], kernel, strides, begin, ceil_mode=bool(attr(node, "ceil_mode", 0)),
                    count_include_pad=bool(attr(node, "count_include_pad", 0)))
    if not attr(node, "count_include_pad", 0):
        raise NotImplementedError(f"AveragePool {node.name!r}: asymmetric pads without count_include_pad")
    return pool(_padded(xs[0], node, rank), kernel, strides, 0, ceil_mode=bool(attr(node, "ceil_mode", 0)))


def _gemm(node: ir.Node, xs):
    a = xs[0].transpose(-1, -2) if attr(node, "transA", 0) else xs[0]
    b = xs[1].transpose(-1, -2) if attr(node, "transB", 0) else xs[1]
    y = attr(node, "alpha", 1.0) * (a @ b)
    return y + attr(node, "beta", 1.0) * xs[2] if len(xs) > 2 and xs[2] is not None else y


def _clip(node: ir.Node, xs):
    low = xs[1] if len(xs) > 1 and xs[1] is not None else attr(node, "min")
    high = xs[2] if len(xs) > 2 and xs[2] is not None else attr(node, "max")
    return torch.clamp(xs[0], low, high)


def _reshape(node: ir.Node, xs):
    shape = _ints(xs[1])
    if not attr(node, "allowzero", 0):
        shape = [xs[0].shape[i] if s == 0 else s for i, s in enumerate(shape)]
    return xs[0].reshape(shape)


def _axes(node: ir.Node, xs, index: int = 1) -> list[int] | None:
    if len(xs) > index and xs[index] is not None:
        return _ints(xs[index])
    found = attr(node, "axes")
    return None if found is None else list(found)


def _reduce(fn):
    def op(node: ir.Node, xs):
        axes = _axes(node, xs)
        keep = bool(attr(node, "keepdims", 1))
        if axes is None or not axes:
            if attr(node, "noop_with_empty_axes", 0) and axes is not None:
                return xs[0]
            axes = list(range(xs[0].dim()))
        return fn(xs[0], dim=axes, keepdim=keep)
    return op


def _unsqueeze(node: ir.Node, xs):
    out = xs[0]
    axes = _axes(node, xs)
    rank = out.dim() + len(axes)
    for axis in sorted(a % rank for a in axes):
        out = out.unsqueeze(axis)
    return out


def _squeeze(node: ir.Node, xs):
    axes = _axes(node, xs)
    if axes is None:
        return xs[0].squeeze()
    return xs[0].squeeze(tuple(a % xs[0].dim() for a in axes))


def _slice(node: ir.Node, xs):
    x = xs[0]
    starts, ends = _ints(xs[1]), _ints(xs[2])
    axes = _ints(xs[3]) if len(xs) > 3 and xs[3] is not None else list(range(len(starts)))
    steps = _ints(xs[4]) if len(xs) > 4 and xs[4] is not None else [1] * len(starts)
    index = [slice(None)] * x.dim()
    for start, end, axis, step in zip(starts, ends, axes, steps, strict=True):
        if step < 0:
            raise NotImplementedError(f"Slice {node.name!r}: negative steps")
        size = x.shape[axis]
        index[axis] = slice(max(min(start, size), -size), max(min(end, size), -size - 1), step)
    return x[tuple(index)]


def _layer_norm(node: ir.Node, xs):
    axis = attr(node, "axis", -1) % xs[0].dim()
    shape = xs[0].shape[axis:]
    bias = xs[2] if len(xs) > 2 else None
    return F.layer_norm(xs[0], shape, xs[1].expand(shape), None if bias is None else bias.expand(shape),
                        attr(node, "epsilon", 1e-5))


def _batch_norm(node: ir.Node, xs):
    return F.batch_norm(xs[0], xs[3], xs[4], xs[1], xs[2], False, 0.0, attr(node, "epsilon", 1e-5))


def _flatten(node: ir.Node, xs):
    axis = attr(node, "axis", 1) % max(xs[0].dim(), 1)
    return xs[0].reshape(int(np.prod(xs[0].shape[:axis])), -1)


def _split(node: ir.Node, xs):
    axis = attr(node, "axis", 0)
    sizes = _ints(xs[1]) if len(xs) > 1 and xs[1] is not None else attr(node, "split")
    if sizes is None:
        count = len(node.outputs)
        sizes = [xs[0].shape[axis] // count] * count
    return tuple(torch.split(xs[0], list(sizes), dim=axis))


def _cast(node: ir.Node, xs):
    dtype = ir.DataType(attr(node, "to")).numpy()
    return xs[0].to(torch.from_numpy(np.zeros(0, dtype)).dtype)


def _constant(node: ir.Node, xs):
    return torch.from_numpy(np.array(attr(node, "value").numpy()))


def _softmax(node: ir.Node, xs):
    return torch.softmax(xs[0], dim=attr(node, "axis", -1))


def _transpose(node: ir.Node, xs):
    perm = attr(node, "perm")
    return xs[0].permute(*(perm if perm is not None else reversed(range(xs[0].dim()))))


def _hard_sigmoid(node: ir.Node, xs):
    return torch.clamp(attr(node, "alpha", 0.2) * xs[0] + attr(node, "beta", 0.5), 0, 1)


def _binary(fn) -> Op:
    return lambda node, xs: fn(xs[0], xs[1])


def _unary(fn) -> Op:
    return lambda node, xs: fn(xs[0])


#: ONNX op → torch function of (node, inputs); the ops of the issue's models (CNNs, OCR, BERT-style encoders).
OPS: dict[str, Op] = {
    "Conv": _conv, "Gemm": _gemm, "MatMul": _binary(torch.matmul),
    "AveragePool": _pool, "MaxPool": _pool,
    "GlobalAveragePool": lambda node, xs: xs[0].mean(dim=tuple(range(2, xs[0].dim())), keepdim=True),
    "Add": _binary(torch.add), "Sub": _binary(torch.sub), "Mul": _binary(torch.mul), "Div": _binary(torch.div),
    "Pow": _binary(torch.pow), "Clip": _clip, "Relu": _unary(torch.relu), "Sigmoid": _unary(torch.sigmoid),
    "Tanh": _unary(torch.tanh), "Erf": _unary(torch.erf), "Sqrt": _unary(torch.sqrt), "Exp": _unary(torch.exp),
    "Neg": _unary(torch.neg), "Reciprocal": _unary(torch.reciprocal), "Identity": _unary(lambda x: x),
    "HardSigmoid": _hard_sigmoid, "HardSwish": _unary(F.hardswish), "Softmax": _softmax,
    "ReduceMean": _reduce(torch.mean), "ReduceSum": _reduce(torch.sum),
    "LayerNormalization": _layer_norm, "BatchNormalization": _batch_norm,
    "Reshape": _reshape, "Flatten": _flatten, "Transpose": _transpose, "Unsqueeze": _unsqueeze,
    "Squeeze": _squeeze, "Slice": _slice, "Split": _split, "Cast": _cast, "Constant": _constant,
    "Concat": lambda node, xs: torch.cat(list(xs), dim=attr(node, "axis")),
    "Gather": lambda node, xs: torch.index_select(xs[0], attr(node, "axis", 0) % xs[0].dim(),
                                                  xs[1].reshape(-1).long()).reshape(
        (*xs[0].shape[:attr(node, "axis", 0) % xs[0].dim()], *xs[1].shape,
         *xs[0].shape[attr(node, "axis", 0) % xs[0].dim() + 1:])),
    "Shape": lambda node, xs: torch.tensor(list(xs[0].shape), dtype=torch.int64),
    "Expand": lambda node, xs: xs[0] * torch.ones(_ints(xs[1]), dtype=xs[0].dtype),
    "Where": lambda node, xs: torch.where(xs[0].bool(), xs[1], xs[2]),
    "Equal": _binary(torch.eq), "Less": _binary(torch.lt), "Greater": _binary(torch.gt), "Not": _unary(torch.logical_not),
}


def unsupported_ops(model: ir.Model) -> list[str]:
    """The op types of ``model`` that ``TorchGraph`` cannot evaluate (custom domains included), sorted."""
    return sorted({node.op_type for node in model.graph if node.domain not in ("", "ai.onnx") or node.op_type not in OPS})


def _tensor(value: ir.Value) -> torch.Tensor:
    return torch.from_numpy(np.array(value.const_value.numpy()))


class TorchGraph:
    """``model`` as a torch function of its inputs; initializers in ``trainable`` are ``nn.Parameter`` objects."""

    def __init__(self, model: ir.Model, trainable: Mapping[str, torch.Tensor] | None = None) -> None:
        missing = unsupported_ops(model)
        if missing:
            raise NotImplementedError(f"no torch evaluation for ONNX op(s) {', '.join(missing)}")
        self.model = model
        self.nodes = list(model.graph)
        self.constants: dict[str, torch.Tensor] = {}
        self.params: dict[str, torch.nn.Parameter] = {}
        self.units = {name: unit.float() for name, unit in (trainable or {}).items()}
        for name, value in model.graph.initializers.items():
            if name in self.units:
                self.params[name] = torch.nn.Parameter(_tensor(value).float() / self.units[name])
            else:
                self.constants[name] = _tensor(value)
        self.outputs = [v.name for v in model.graph.outputs]

    def values(self) -> dict[str, torch.Tensor]:
        """The trainable initializers' current values (``param · unit``)."""
        return {name: param * self.units[name] for name, param in self.params.items()}

    def forward(self, feeds: Mapping[str, torch.Tensor],
                inputs: Mapping[tuple[str, int], Callable[[torch.Tensor], torch.Tensor]] | None = None,
                ) -> list[torch.Tensor]:
        """The graph outputs for ``feeds``; ``inputs[(node output, index)]`` transforms that node's input first."""
        inputs = inputs or {}
        env: dict[str, torch.Tensor] = {**self.constants, **self.values(), **feeds}
        for node in self.nodes:
            first = node.outputs[0].name
            xs = []
            for i, value in enumerate(node.inputs):
                x = None if value is None or value.name == "" else env[value.name]
                change = inputs.get((first, i))
                xs.append(change(x) if change is not None else x)
            out = OPS[node.op_type](node, xs)
            for value, y in zip(node.outputs, out if isinstance(out, tuple) else (out,), strict=False):
                env[value.name] = y
        return [env[name] for name in self.outputs]
