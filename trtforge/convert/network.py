"""The one emission layer: every converter adds layers here, which builds the REAL TensorRT network
(strongly typed, through the shim) and records each layer with the attributes TensorRT was given.

The record is what the reference evaluator (``convert/evaluator.py``) executes, so numerics are
tested on the CPU with TensorRT's documented semantics, while the same network builds with TensorRT.

Example:
    >>> net = Network("demo")
    >>> x = net.input("x", torch.float32, (-1, 4))
    >>> y = net.activation(x, "RELU")
    >>> net.output(y, "y")
    >>> [layer.kind for layer in net.record.layers]
    ['activation']
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from trtforge.core import trt
from trtforge.core.errors import InternalError

#: torch dtype ↔ TensorRT DataType name (strongly typed networks carry these exactly).
TORCH_TO_TRT: dict[torch.dtype, str] = {
    torch.float32: "FLOAT", torch.float16: "HALF", torch.bfloat16: "BF16", torch.int32: "INT32",
    torch.int64: "INT64", torch.bool: "BOOL", torch.int8: "INT8", torch.uint8: "UINT8",
}
TRT_TO_TORCH: dict[str, torch.dtype] = {v: k for k, v in TORCH_TO_TRT.items()}


@dataclass(eq=False)
class Tensor:
    """A tensor of the network: its name in the record, dtype, TensorRT's shape (-1 = dynamic)."""

    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    itensor: Any = field(repr=False, default=None)

    @property
    def rank(self) -> int:
        return len(self.shape)


@dataclass(frozen=True)
class Layer:
    """One recorded layer: its kind, input names (None = unset optional input), output names, attrs."""

    kind: str
    inputs: tuple[str | None, ...]
    outputs: tuple[str, ...]
    attrs: dict


@dataclass
class Record:
    """The recorded network: inputs (name, dtype, shape), layers in order, outputs."""

    inputs: list[tuple[str, torch.dtype, tuple[int, ...]]] = field(default_factory=list)
    layers: list[Layer] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)

    def kinds(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for layer in self.layers:
            counts[layer.kind] = counts.get(layer.kind, 0) + 1
        return counts

    def canonical(self) -> bytes:
        """The network as canonical JSON (weights as dtype, shape and sha256): equal bytes, equal
        networks. The direct path's engine-cache key hashes these, as the ONNX path hashes its graph.

        Example:
            >>> hashlib.sha256(lowered.net.record.canonical()).hexdigest()[:12]
        """
        data = {"inputs": [[n, str(d), list(s)] for n, d, s in self.inputs], "outputs": list(self.outputs),
                "layers": [[la.kind, list(la.inputs), list(la.outputs),
                            {k: _canonical(v) for k, v in sorted(la.attrs.items())}] for la in self.layers]}
        return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()


def _canonical(value: Any) -> Any:
    """A layer attribute as JSON: tensors by dtype, shape and the sha256 of their bytes."""
    if isinstance(value, torch.Tensor):
        raw = value.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
        return {"tensor": str(value.dtype), "shape": list(value.shape), "sha256": hashlib.sha256(raw).hexdigest()}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    if isinstance(value, torch.dtype):
        return str(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


def _np(value: torch.Tensor) -> np.ndarray:
    value = value.detach().cpu().contiguous()
    if value.dtype == torch.bfloat16:
        raise InternalError("bfloat16 constants go in as float32 + a cast layer")
    return np.ascontiguousarray(value.numpy())


class Network:
    """A strongly typed TensorRT network plus its record; one method per layer kind we emit."""

    def __init__(self, name: str = "trtforge") -> None:
        from trtforge.builder.build import RecordingLogger

        self.mod = trt.bindings()
        self.logger = RecordingLogger()
        self.builder = self.mod.Builder(self.logger.trt_logger)
        self.net = self.builder.create_network(trt.network_flags())
        self.net.name = name
        self.record = Record()
        #: input name → dims as ints and sympy expressions of the batch symbol (for the profile)
        self.dynamic_dims: dict[str, tuple] = {}
        self._keep: list[np.ndarray] = []  # TensorRT reads weights at build time: keep them alive
        self._count = 0

    # -- bookkeeping -------------------------------------------------------------------------
    def _wrap(self, itensor) -> Tensor:
        self._count += 1
        name = f"t{self._count}"
        itensor.name = name
        dtype = TRT_TO_TORCH[itensor.dtype.name]
        return Tensor(name, dtype, tuple(itensor.shape), itensor)

    def _add(self, kind: str, layer, inputs: list[Tensor | None], attrs: dict, outputs: int = 1):
        if layer is None:
            raise InternalError(f"TensorRT refused to add a {kind} layer with {attrs}: {self.logger.errors()}")
        layer.name = f"{kind}_{len(self.record.layers)}"
        outs = [self._wrap(layer.get_output(i)) for i in range(outputs)]
        self.record.layers.append(Layer(kind, tuple(t.name if t else None for t in inputs),
                                        tuple(t.name for t in outs), attrs))
        return outs[0] if outputs == 1 else outs

    def _enum(self, enum: str, name: str):
        return getattr(getattr(self.mod, enum), name)

    def _weights(self, value: torch.Tensor | None):
        if value is None:
            return self.mod.Weights()
        array = _np(value)
        self._keep.append(array)
        return self.mod.Weights(array)

    # -- graph I/O ----------------------------------------------------------------------------
    def input(self, name: str, dtype: torch.dtype, shape: tuple[int, ...]) -> Tensor:
        itensor = self.net.add_input(name, self._enum("DataType", TORCH_TO_TRT[dtype]), tuple(shape))
        self.record.inputs.append((name, dtype, tuple(shape)))
        return Tensor(name, dtype, tuple(itensor.shape), itensor)

    def output(self, tensor: Tensor, name: str) -> None:
        tensor.itensor.name = name
        self.record.layers.append(Layer("identity", (tensor.name,), (name,), {}))
        tensor.name = name
        self.net.mark_output(tensor.itensor)
        self.record.outputs.append(name)

    # -- layers --------------------------------------------------------------------------------
    def constant(self, value: torch.Tensor) -> Tensor:
        value = value.detach().cpu()
        if value.dtype == torch.bfloat16:
            return self.cast(self.constant(value.float()), torch.bfloat16)
        store = value.to(torch.int32) if value.dtype == torch.bool else value
        layer = self.net.add_constant(tuple(value.shape), self._weights(store))
        out = self._add("constant", layer, [], {"value": store.clone()})
        return self.cast(out, torch.bool) if value.dtype == torch.bool else out

    def elementwise(self, a: Tensor, b: Tensor, op: str) -> Tensor:
        a, b = self.same_rank(a, b)
        layer = self.net.add_elementwise(a.itensor, b.itensor, self._enum("ElementWiseOperation", op))
        return self._add("elementwise", layer, [a, b], {"op": op})

    def unary(self, x: Tensor, op: str) -> Tensor:
        layer = self.net.add_unary(x.itensor, self._enum("UnaryOperation", op))
        return self._add("unary", layer, [x], {"op": op})

    def activation(self, x: Tensor, op: str, alpha: float = 0.0, beta: float = 0.0) -> Tensor:
        layer = self.net.add_activation(x.itensor, self._enum("ActivationType", op))
        layer.alpha, layer.beta = alpha, beta
        return self._add("activation", layer, [x], {"op": op, "alpha": alpha, "beta": beta})

    def cast(self, x: Tensor, dtype: torch.dtype) -> Tensor:
        if x.dtype == dtype:
            return x
        layer = self.net.add_cast(x.itensor, self._enum("DataType", TORCH_TO_TRT[dtype]))
        return self._add("cast", layer, [x], {"dtype": dtype})

    def quantize(self, x: Tensor, scale: torch.Tensor, axis: int = 0) -> Tensor:
        """TensorRT's IQuantizeLayer to INT8: ``clamp(round_half_even(x / scale), -128, 127)``; ``scale`` is a
        0-d tensor (per tensor) or 1-D along ``axis`` (per channel), in ``x``'s dtype (strongly typed)."""
        s = self.constant(scale.detach().to(x.dtype))
        layer = self.net.add_quantize(x.itensor, s.itensor, self._enum("DataType", "INT8"))
        if layer is not None:
            layer.axis = axis
        return self._add("quantize", layer, [x, s], {"axis": axis})

    def dequantize(self, q: Tensor, scale: torch.Tensor, dtype: torch.dtype, axis: int = 0) -> Tensor:
        """TensorRT's IDequantizeLayer: ``q * scale`` in ``dtype`` (the scale's dtype), axis as in ``quantize``."""
        s = self.constant(scale.detach().to(dtype))
        layer = self.net.add_dequantize(q.itensor, s.itensor, self._enum("DataType", TORCH_TO_TRT[dtype]))
        if layer is not None:
            layer.axis = axis
        return self._add("dequantize", layer, [q, s], {"axis": axis})

    def shuffle(self, x: Tensor, *, first: tuple[int, ...] | None = None, reshape: tuple[int, ...] | None = None,
                shape: Tensor | None = None, second: tuple[int, ...] | None = None) -> Tensor:
        """TensorRT's shuffle: first transpose, reshape (0 copies, -1 infers) or a shape tensor, second."""
        layer = self.net.add_shuffle(x.itensor)
        if first is not None:
            layer.first_transpose = tuple(first)
        if shape is not None:
            layer.set_input(1, shape.itensor)
        elif reshape is not None:
            layer.reshape_dims = tuple(reshape)
        if second is not None:
            layer.second_transpose = tuple(second)
        attrs = {"first": first, "reshape": reshape, "second": second}
        return self._add("shuffle", layer, [x, shape], attrs)

    def concat(self, tensors: list[Tensor], axis: int) -> Tensor:
        layer = self.net.add_concatenation([t.itensor for t in tensors])
        layer.axis = axis
        return self._add("concatenation", layer, list(tensors), {"axis": axis})

    def slice(self, x: Tensor, start, size, stride, *, mode: str = "STRICT_BOUNDS",
              fill: Tensor | None = None) -> Tensor:
        """Static parts as tuples, dynamic parts as 1-D INT64 tensors (start, size, stride)."""
        statics = [v if not isinstance(v, Tensor) else (0,) * x.rank for v in (start, size, stride)]
        layer = self.net.add_slice(x.itensor, *statics)
        inputs: list[Tensor | None] = [x, None, None, None, None]
        for index, value in enumerate((start, size, stride), start=1):
            if isinstance(value, Tensor):
                layer.set_input(index, value.itensor)
                inputs[index] = value
        layer.mode = self._enum("SampleMode", mode)
        if fill is not None:
            layer.set_input(4, fill.itensor)
            inputs[4] = fill
        attrs = {"start": start if not isinstance(start, Tensor) else None,
                 "size": size if not isinstance(size, Tensor) else None,
                 "stride": stride if not isinstance(stride, Tensor) else None, "mode": mode}
        return self._add("slice", layer, inputs, attrs)

    def gather(self, x: Tensor, indices: Tensor, axis: int, mode: str = "DEFAULT") -> Tensor:
        """DEFAULT: out = x with axis replaced by indices' shape; ELEMENT: torch.gather's semantics."""
        layer = self.net.add_gather_v2(x.itensor, indices.itensor, self._enum("GatherMode", mode))
        layer.axis = axis
        return self._add("gather", layer, [x, indices], {"axis": axis, "mode": mode})

    def matmul(self, a: Tensor, b: Tensor, transpose_a: bool = False, transpose_b: bool = False) -> Tensor:
        a, b = self.same_rank(a, b)
        ops = [self._enum("MatrixOperation", "TRANSPOSE" if t else "NONE") for t in (transpose_a, transpose_b)]
        layer = self.net.add_matrix_multiply(a.itensor, ops[0], b.itensor, ops[1])
        return self._add("matrix_multiply", layer, [a, b], {"transpose_a": transpose_a, "transpose_b": transpose_b})

    def reduce(self, x: Tensor, op: str, axes: tuple[int, ...], keep: bool) -> Tensor:
        mask = sum(1 << a for a in axes)
        layer = self.net.add_reduce(x.itensor, self._enum("ReduceOperation", op), mask, keep)
        return self._add("reduce", layer, [x], {"op": op, "axes": tuple(axes), "keep": keep})

    def softmax(self, x: Tensor, axis: int) -> Tensor:
        layer = self.net.add_softmax(x.itensor)
        layer.axes = 1 << axis
        return self._add("softmax", layer, [x], {"axis": axis})

    def topk(self, x: Tensor, op: str, k: int, axis: int) -> list[Tensor]:
        layer = self.net.add_topk(x.itensor, self._enum("TopKOperation", op), k, 1 << axis)
        return self._add("topk", layer, [x], {"op": op, "k": k, "axis": axis}, outputs=2)

    def select(self, cond: Tensor, a: Tensor, b: Tensor) -> Tensor:
        cond, a = self.same_rank(cond, a)
        cond, b = self.same_rank(cond, b)
        a, b = self.same_rank(a, b)
        layer = self.net.add_select(cond.itensor, a.itensor, b.itensor)
        return self._add("select", layer, [cond, a, b], {})

    def shape(self, x: Tensor) -> Tensor:
        return self._add("shape", self.net.add_shape(x.itensor), [x], {})

    def convolution(self, x: Tensor, weight: torch.Tensor, bias: torch.Tensor | None, *, stride, pre, post,
                    dilation, groups: int, transposed: bool = False, weight_input: Tensor | None = None) -> Tensor:
        """``weight_input``: the kernel as a network tensor (e.g. weights → Q → DQ); ``weight`` then gives
        only the kernel's shape and is not recorded (the evaluator reads the tensor input)."""
        kernel = tuple(weight.shape[2:])
        maps = weight.shape[1] * groups if transposed else weight.shape[0]
        add = self.net.add_deconvolution_nd if transposed else self.net.add_convolution_nd
        # NumPy has no bfloat16: BF16 weights go in as tensor inputs, as do computed ones.
        as_tensors = weight.dtype == torch.bfloat16 or weight_input is not None
        layer = add(x.itensor, maps, kernel, self._weights(None if as_tensors else weight),
                    self._weights(None if as_tensors else bias))
        if as_tensors:
            layer.set_input(1, (weight_input or self.constant(weight)).itensor)
            if bias is not None:
                layer.set_input(2, self.constant(bias).itensor)
        layer.stride_nd, layer.pre_padding, layer.post_padding = tuple(stride), tuple(pre), tuple(post)
        layer.dilation_nd, layer.num_groups = tuple(dilation), groups
        attrs = {"weight": None if weight_input is not None else weight.detach().clone(),
                 "bias": None if bias is None else bias.detach().clone(),
                 "stride": tuple(stride), "pre": tuple(pre), "post": tuple(post), "dilation": tuple(dilation),
                 "groups": groups}
        inputs = [x] if weight_input is None else [x, weight_input]
        return self._add("deconvolution" if transposed else "convolution", layer, inputs, attrs)

    def pooling(self, x: Tensor, op: str, window, *, stride, pre, post, exclude_padding: bool = True) -> Tensor:
        layer = self.net.add_pooling_nd(x.itensor, self._enum("PoolingType", op), tuple(window))
        layer.stride_nd, layer.pre_padding, layer.post_padding = tuple(stride), tuple(pre), tuple(post)
        layer.average_count_excludes_padding = exclude_padding
        attrs = {"op": op, "window": tuple(window), "stride": tuple(stride), "pre": tuple(pre),
                 "post": tuple(post), "exclude_padding": exclude_padding}
        return self._add("pooling", layer, [x], attrs)

    def normalization(self, x: Tensor, scale: Tensor, bias: Tensor, axes: tuple[int, ...], eps: float) -> Tensor:
        mask = sum(1 << a for a in axes)
        layer = self.net.add_normalization(x.itensor, scale.itensor, bias.itensor, mask)
        layer.epsilon = eps
        return self._add("normalization", layer, [x, scale, bias], {"axes": tuple(axes), "eps": eps})

    def resize(self, x: Tensor, *, mode: str, coords: str, rounding: str = "FLOOR",
               scales: tuple[float, ...], cubic_coeff: float = -0.75) -> Tensor:
        layer = self.net.add_resize(x.itensor)
        layer.resize_mode = self._enum("InterpolationMode", mode)
        layer.coordinate_transformation = self._enum("ResizeCoordinateTransformation", coords)
        layer.nearest_rounding = self._enum("ResizeRoundMode", rounding)
        layer.scales = list(scales)
        layer.cubic_coeff = cubic_coeff
        layer.exclude_outside = False
        attrs = {"mode": mode, "coords": coords, "rounding": rounding, "scales": tuple(scales),
                 "cubic_coeff": cubic_coeff}
        return self._add("resize", layer, [x], attrs)

    def grid_sample(self, x: Tensor, grid: Tensor, *, mode: str, align_corners: bool, sample_mode: str) -> Tensor:
        layer = self.net.add_grid_sample(x.itensor, grid.itensor)
        layer.interpolation_mode = self._enum("InterpolationMode", mode)
        layer.align_corners = align_corners
        layer.sample_mode = self._enum("SampleMode", sample_mode)
        attrs = {"mode": mode, "align_corners": align_corners, "sample_mode": sample_mode}
        return self._add("grid_sample", layer, [x, grid], attrs)

    def linspace(self, count: Tensor, start: float, step: float, dtype: torch.dtype) -> Tensor:
        """A fill layer in LINSPACE mode: ``start + step * i`` for i < count (count: a (1,) INT64 tensor)."""
        layer = self.net.add_fill((0,), self._enum("FillOperation", "LINSPACE"), self._enum("DataType",
                                                                                            TORCH_TO_TRT[dtype]))
        layer.set_input(0, count.itensor)
        scalar = torch.float32 if dtype.is_floating_point else dtype
        first = self.constant(torch.tensor(start, dtype=scalar))
        delta = self.constant(torch.tensor([step], dtype=scalar))
        layer.set_input(1, first.itensor)
        layer.set_input(2, delta.itensor)
        return self._add("fill", layer, [count, first, delta], {"dtype": dtype})

    # -- helpers built from the layers above ----------------------------------------------------
    def unsqueeze_front(self, x: Tensor, rank: int) -> Tensor:
        """Prepend 1s up to ``rank`` (TensorRT broadcasts only tensors of equal rank)."""
        if x.rank >= rank:
            return x
        ones = (1,) * (rank - x.rank)
        if -1 not in x.shape:
            return self.shuffle(x, reshape=ones + x.shape)
        shape = self.concat([self.constant(torch.tensor(ones, dtype=torch.int64)), self.shape(x)], 0)
        return self.shuffle(x, shape=shape)

    def same_rank(self, a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
        rank = max(a.rank, b.rank)
        return self.unsqueeze_front(a, rank), self.unsqueeze_front(b, rank)
