"""What a converter works with: the network, the precision, and turning arguments into tensors.

Values in a lowering are network ``Tensor``s, constants (``torch.Tensor``, folded at conversion
time), Python scalars, ``SymDim``s (a symbolic size such as the dynamic batch, carried as a 1-element
INT64 tensor), or tuples of these (multi-output ops).

Example:
    >>> x = ctx.tensor(args[0])                   # a network tensor, whatever the argument was
    >>> one = ctx.tensor(1.0, like=x)             # a broadcastable constant of x's dtype and rank
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from trtforge.convert.fp32_plan import Fp32Plan
from trtforge.convert.int8 import layer_for
from trtforge.convert.network import Network, Tensor
from trtforge.core.errors import Unsupported
from trtforge.core.quant_plan import QuantLayer, QuantPlan


class ConversionRefused(Unsupported):
    """A converter cannot lower this node as it is; the message is the reason (shown in coverage)."""


@dataclass(eq=False)
class SymDim:
    """A symbolic size (e.g. the batch): a (1,) INT64 network tensor."""

    tensor: Tensor


def is_const(arg) -> bool:
    """True when an FX argument is known at conversion time (weights, constants, folded values)."""
    if isinstance(arg, torch.fx.Node):
        return bool(arg.meta.get("trtforge_const"))
    if isinstance(arg, (list, tuple)):
        return all(is_const(a) for a in arg)
    return not isinstance(arg, torch.SymInt)


def example(node) -> torch.Tensor | None:
    """The example value (a fake tensor) of an FX argument, or None."""
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


def static_shape(value) -> tuple[int, ...]:
    """A fake tensor's shape with -1 for symbolic dims."""
    return tuple(d if isinstance(d, int) else -1 for d in value.shape)


@dataclass
class Context:
    """The network being built, the precision and which nodes stay FP32 (``fp32``); helpers shared by every
    converter. ``lower_graph`` runs the converter of a node the plan keeps in FP32; a converter asks ``keeps``
    only for a part of its own decomposition (an attention's mask or softmax)."""

    net: Network
    compute: torch.dtype = torch.float32
    fp32: Fp32Plan | None = None
    #: The quantization plan, its layers addressed by module path (None: no INT8), and the module paths
    #: quantized so far → their node
    int8: QuantPlan | None = None
    int8_layers: dict[str, str] = field(default_factory=dict)
    _sizes: dict = field(default_factory=dict)

    def int8_scales(self, node: torch.fx.Node) -> tuple[str, QuantLayer] | None:
        """The (module path, plan layer) when ``node`` is to be quantized: its module is a layer of the plan
        and no other node of that module was quantized (one Q/DQ'd product per Conv/Linear module)."""
        found = layer_for(self.int8, node) if self.int8 is not None else None
        return None if found is None or found[0] in self.int8_layers else found

    def dtype(self, dtype: torch.dtype) -> torch.dtype:
        """The network dtype for a model dtype (FP32 → the compute precision)."""
        return self.compute if dtype == torch.float32 else dtype

    def out_dtype(self, node: torch.fx.Node) -> torch.dtype:
        value = node.meta["val"]
        return self.dtype(value[0].dtype if isinstance(value, (tuple, list)) else value.dtype)

    def tensor(self, value, *, dtype: torch.dtype | None = None, like: Tensor | None = None) -> Tensor:
        """A network tensor for ``value`` (a Tensor, a constant tensor or a scalar), cast to ``dtype``
        (default: ``like``'s dtype, else the constant's network dtype), scalars shaped to ``like``'s rank."""
        if dtype is None and like is not None:
            dtype = like.dtype
        if isinstance(value, Tensor):
            return self.net.cast(value, dtype) if dtype is not None else value
        if isinstance(value, SymDim):
            return self.net.cast(value.tensor, dtype) if dtype is not None else value.tensor
        if isinstance(value, (bool, int, float)):
            rank = like.rank if like is not None else 0
            base = torch.tensor(value, dtype=dtype or torch.float32).reshape((1,) * rank)
            return self.net.constant(base)
        if isinstance(value, torch.Tensor):
            target = dtype or self.dtype(value.dtype)
            if like is not None and value.dim() < like.rank:
                value = value.reshape((1,) * (like.rank - value.dim()) + tuple(value.shape))
            return self.net.constant(value.to(target))
        raise ConversionRefused(f"cannot make a tensor of {type(value).__name__} {value!r}")

    def dim(self, value) -> Tensor:
        """A (1,) INT64 tensor for an int or a SymDim."""
        if isinstance(value, SymDim):
            return value.tensor
        return self.net.constant(torch.tensor([int(value)], dtype=torch.int64))

    def shape_tensor(self, dims) -> Tensor | None:
        """A 1-D INT64 shape tensor when any of ``dims`` is symbolic, else None (use the static tuple)."""
        if not any(isinstance(d, SymDim) for d in dims):
            return None
        return self.net.concat([self.dim(d) for d in dims], 0)

    def size_of(self, x: Tensor, axis: int) -> SymDim | int:
        """Dimension ``axis`` of ``x``: an int when static, else a SymDim read from the shape."""
        if x.shape[axis] >= 0:
            return x.shape[axis]
        key = (x.name, axis)
        if key not in self._sizes:
            index = self.net.constant(torch.tensor([axis], dtype=torch.int32))
            self._sizes[key] = SymDim(self.net.gather(self.net.shape(x), index, 0))
        return self._sizes[key]

    def reshape(self, x: Tensor, dims) -> Tensor:
        """Reshape to ``dims`` (ints and SymDims)."""
        shape = self.shape_tensor(dims)
        if shape is not None:
            return self.net.shuffle(x, shape=shape)
        return self.net.shuffle(x, reshape=tuple(int(d) for d in dims))

    def keeps(self, node: torch.fx.Node, part: str) -> bool:
        """Whether the FP32 plan keeps ``part`` of ``node``'s decomposition in FP32 under a lower precision."""
        return self.compute != torch.float32 and self.fp32 is not None and self.fp32.keeps(node, part)

    def dims(self, x: Tensor) -> list:
        """Every dimension of ``x``: ints where static, SymDims where dynamic."""
        return [self.size_of(x, axis) for axis in range(x.rank)]

    def sizes(self, dims) -> tuple[int, ...] | Tensor:
        """``dims`` as a static tuple, or an INT64 shape tensor when any is symbolic (for slice sizes)."""
        shape = self.shape_tensor(dims)
        return tuple(int(d) for d in dims) if shape is None else shape

    def broadcast(self, x: Tensor, dims) -> Tensor:
        """Broadcast ``x`` (rank ≤ len(dims), dims of 1 stretch) to ``dims`` with a stride-0 slice."""
        x = self.net.unsqueeze_front(x, len(dims))
        stride = tuple(0 if x.shape[i] == 1 and dims[i] != 1 else 1 for i in range(x.rank))
        if all(s == 1 for s in stride) and all(isinstance(d, int) and d == x.shape[i] for i, d in enumerate(dims)):
            return x
        return self.net.slice(x, (0,) * x.rank, self.sizes(dims), stride)
