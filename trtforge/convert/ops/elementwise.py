"""Elementwise arithmetic, comparisons, logic, unary math and activations.

Operands are cast to the op's result dtype (torch's type promotion, read from the node's example
value) and brought to equal rank, because TensorRT's strongly typed elementwise layer takes one
dtype and broadcasts only equal ranks.
"""

from __future__ import annotations

import math

import torch

from trtforge.convert.context import Context, SymDim, example
from trtforge.convert.network import Tensor
from trtforge.convert.registry import converter


def _operand_dtype(ctx: Context, node: torch.fx.Node) -> torch.dtype:
    """The dtype both operands are cast to: the promoted type of the inputs (not the bool result)."""
    values = [example(a) if isinstance(a, torch.fx.Node) else a for a in node.args[:2]]
    tensors = [v for v in values if isinstance(v, torch.Tensor)]
    dtype = tensors[0].dtype
    for other in tensors[1:]:
        dtype = torch.promote_types(dtype, other.dtype)
    scalars = [v for v in values if isinstance(v, (int, float, bool)) and not isinstance(v, torch.Tensor)]
    if any(isinstance(s, float) for s in scalars) and not dtype.is_floating_point:
        dtype = torch.float32
    return ctx.dtype(dtype)


def _pair(ctx: Context, a, b, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    ref = next(v for v in (a, b) if isinstance(v, (Tensor, SymDim)))
    ref = ctx.tensor(ref, dtype=dtype)
    return ctx.tensor(a, dtype=dtype, like=ref), ctx.tensor(b, dtype=dtype, like=ref)


def binary(ctx: Context, node: torch.fx.Node, a, b, op: str, dtype: torch.dtype | None = None) -> Tensor:
    """``a op b`` in ``dtype`` (default: the node's promoted operand dtype)."""
    x, y = _pair(ctx, a, b, dtype or _operand_dtype(ctx, node))
    return ctx.net.elementwise(x, y, op)


def _arith(op: str):
    def convert(ctx: Context, node, args):
        a, b = args[0], args[1]
        dtype = ctx.out_dtype(node)
        if len(args) > 2 and args[2] not in (None, 1):  # alpha of add/sub
            b = binary(ctx, node, b, args[2], "PROD", dtype)
        return binary(ctx, node, a, b, op, dtype)
    return convert


for _target, _op in (("add", "SUM"), ("sub", "SUB"), ("mul", "PROD"), ("div", "DIV")):
    converter(f"aten.{_target}.Tensor", f"aten.{_target}.Scalar")(_arith(_op))
converter("aten.maximum.default")(_arith("MAX"))
converter("aten.minimum.default")(_arith("MIN"))
converter("aten.pow.Tensor_Scalar", "aten.pow.Tensor_Tensor", "aten.pow.Scalar")(_arith("POW"))


@converter("aten.div.Tensor_mode")
def div_mode(ctx: Context, node, args):
    a, b, mode = args[0], args[1], args[2]
    dtype = ctx.out_dtype(node)
    if mode == "floor":
        if dtype.is_floating_point:
            return ctx.net.unary(binary(ctx, node, a, b, "DIV", dtype), "FLOOR")
        return binary(ctx, node, a, b, "FLOOR_DIV", dtype)
    quotient = binary(ctx, node, a, b, "DIV", dtype)
    return _trunc(ctx, quotient) if mode == "trunc" and dtype.is_floating_point else quotient


def _trunc(ctx: Context, x: Tensor) -> Tensor:
    positive = ctx.net.elementwise(x, ctx.tensor(0.0, like=x), "GREATER")
    return ctx.net.select(positive, ctx.net.unary(x, "FLOOR"), ctx.net.unary(x, "CEIL"))


@converter("aten.floor_divide.default")
def floor_divide(ctx: Context, node, args):
    return div_mode(ctx, node, [args[0], args[1], "floor"])


def _remainder(floor: bool):
    def convert(ctx: Context, node, args):
        dtype = ctx.out_dtype(node)
        a, b = _pair(ctx, args[0], args[1], dtype)
        if dtype.is_floating_point:
            q = ctx.net.elementwise(a, b, "DIV")
            q = ctx.net.unary(q, "FLOOR") if floor else _trunc(ctx, q)
        else:
            q = ctx.net.elementwise(a, b, "FLOOR_DIV" if floor else "DIV")
        return ctx.net.elementwise(a, ctx.net.elementwise(q, b, "PROD"), "SUB")
    return convert


converter("aten.remainder.Tensor", "aten.remainder.Scalar")(_remainder(True))
converter("aten.fmod.Tensor", "aten.fmod.Scalar")(_remainder(False))


def _compare(op: str, negate: bool = False, swap: bool = False):
    def convert(ctx: Context, node, args):
        a, b = (args[1], args[0]) if swap else (args[0], args[1])
        out = binary(ctx, node, a, b, op)
        return ctx.net.unary(out, "NOT") if negate else out
    return convert


for _name, _spec in {"eq": ("EQUAL",), "ne": ("EQUAL", True), "lt": ("LESS",), "gt": ("GREATER",),
                     "le": ("GREATER", True), "ge": ("LESS", True)}.items():
    converter(f"aten.{_name}.Tensor", f"aten.{_name}.Scalar")(_compare(*_spec))


def _logic(op: str):
    def convert(ctx: Context, node, args):
        return binary(ctx, node, args[0], args[1], op, torch.bool)
    return convert


def _bool_only(node: torch.fx.Node) -> str | None:
    values = [example(a) for a in node.args[:2] if isinstance(a, torch.fx.Node)]
    if any(v.dtype != torch.bool for v in values):
        return "bitwise ops on integers are not in TensorRT; only bool tensors"
    return None


for _name, _op in (("and", "AND"), ("or", "OR"), ("xor", "XOR")):
    converter(f"aten.logical_{_name}.default")(_logic(_op))
    converter(f"aten.bitwise_{_name}.Tensor", validator=_bool_only)(_logic(_op))


@converter("aten.logical_not.default")
def logical_not(ctx: Context, node, args):
    return ctx.net.unary(ctx.tensor(args[0], dtype=torch.bool), "NOT")


@converter("aten.bitwise_not.default", validator=_bool_only)
def bitwise_not(ctx: Context, node, args):
    return logical_not(ctx, node, args)


@converter("aten.where.self")
def where(ctx: Context, node, args):
    dtype = ctx.out_dtype(node)
    ref = next(ctx.tensor(v, dtype=dtype) for v in args[1:3] if isinstance(v, Tensor)) \
        if any(isinstance(v, Tensor) for v in args[1:3]) else ctx.tensor(args[0])
    cond = ctx.tensor(args[0], dtype=torch.bool)
    a = ctx.tensor(args[1], dtype=dtype, like=ref if ref.dtype == dtype else None)
    b = ctx.tensor(args[2], dtype=dtype, like=a)
    return ctx.net.select(cond, a, b)


@converter("aten.clamp.default", "aten.clamp.Tensor")
def clamp(ctx: Context, node, args):
    dtype = ctx.out_dtype(node)
    x = ctx.tensor(args[0], dtype=dtype)
    if args[1] is not None:
        x = ctx.net.elementwise(x, ctx.tensor(args[1], dtype=dtype, like=x), "MAX")
    if args[2] is not None:
        x = ctx.net.elementwise(x, ctx.tensor(args[2], dtype=dtype, like=x), "MIN")
    return x


@converter("aten.clamp_min.default")
def clamp_min(ctx: Context, node, args):
    return clamp(ctx, node, [args[0], args[1], None])


@converter("aten.clamp_max.default")
def clamp_max(ctx: Context, node, args):
    return clamp(ctx, node, [args[0], None, args[1]])


def _float_only(node: torch.fx.Node) -> str | None:
    value = example(node.args[0])
    if value is not None and not value.dtype.is_floating_point:
        return f"TensorRT's unary math takes float tensors; got {value.dtype}"
    return None


def _unary(op: str):
    def convert(ctx: Context, node, args):
        return ctx.net.unary(ctx.tensor(args[0], dtype=ctx.out_dtype(node)), op)
    return convert


UNARY_OPS = {
    "exp": "EXP", "log": "LOG", "sqrt": "SQRT", "reciprocal": "RECIP", "sin": "SIN", "cos": "COS",
    "tan": "TAN", "sinh": "SINH", "cosh": "COSH", "asin": "ASIN", "acos": "ACOS", "atan": "ATAN",
    "asinh": "ASINH", "acosh": "ACOSH", "atanh": "ATANH", "ceil": "CEIL", "floor": "FLOOR", "erf": "ERF",
    "round": "ROUND",
}
for _name, _op in UNARY_OPS.items():
    converter(f"aten.{_name}.default", validator=_float_only)(_unary(_op))
converter("aten.abs.default")(_unary("ABS"))
converter("aten.neg.default")(_unary("NEG"))
converter("aten.sign.default")(_unary("SIGN"))


@converter("aten.isinf.default", "aten.isnan.default", validator=_float_only)
def isinf_isnan(ctx: Context, node, args):
    op = "ISINF" if "isinf" in str(node.target) else "ISNAN"
    return ctx.net.unary(ctx.tensor(args[0]), op)


@converter("aten.rsqrt.default", validator=_float_only)
def rsqrt(ctx: Context, node, args):
    return ctx.net.unary(ctx.net.unary(ctx.tensor(args[0], dtype=ctx.out_dtype(node)), "SQRT"), "RECIP")


@converter("aten.trunc.default", validator=_float_only)
def trunc(ctx: Context, node, args):
    return _trunc(ctx, ctx.tensor(args[0]))


def _composite(fn):
    def convert(ctx: Context, node, args):
        x = ctx.tensor(args[0], dtype=ctx.out_dtype(node))
        return fn(ctx, x)
    return convert


def _log_base(base: float):
    return lambda ctx, x: ctx.net.elementwise(ctx.net.unary(x, "LOG"), ctx.tensor(math.log(base), like=x), "DIV")


converter("aten.log2.default", validator=_float_only)(_composite(_log_base(2.0)))
converter("aten.log10.default", validator=_float_only)(_composite(_log_base(10.0)))
converter("aten.log1p.default", validator=_float_only)(_composite(
    lambda ctx, x: ctx.net.unary(ctx.net.elementwise(x, ctx.tensor(1.0, like=x), "SUM"), "LOG")))
converter("aten.expm1.default", validator=_float_only)(_composite(
    lambda ctx, x: ctx.net.elementwise(ctx.net.unary(x, "EXP"), ctx.tensor(1.0, like=x), "SUB")))
converter("aten.exp2.default", validator=_float_only)(_composite(
    lambda ctx, x: ctx.net.elementwise(ctx.tensor(2.0, like=x), x, "POW")))


def _activation(op: str, alpha=0.0, beta=0.0):
    def convert(ctx: Context, node, args):
        return ctx.net.activation(ctx.tensor(args[0], dtype=ctx.out_dtype(node)), op, alpha, beta)
    return convert


converter("aten.relu.default", validator=_float_only)(_activation("RELU"))
converter("aten.sigmoid.default", validator=_float_only)(_activation("SIGMOID"))
converter("aten.tanh.default", validator=_float_only)(_activation("TANH"))
converter("aten.hardsigmoid.default", validator=_float_only)(_activation("HARD_SIGMOID", 1 / 6, 0.5))


@converter("aten.gelu.default", validator=_float_only)
def gelu(ctx: Context, node, args):
    op = "GELU_TANH" if args[1] == "tanh" else "GELU_ERF"
    return ctx.net.activation(ctx.tensor(args[0], dtype=ctx.out_dtype(node)), op)


@converter("aten.leaky_relu.default", validator=_float_only)
def leaky_relu(ctx: Context, node, args):
    return ctx.net.activation(ctx.tensor(args[0]), "LEAKY_RELU", float(args[1]))


@converter("aten.elu.default", validator=lambda n: _float_only(n) or (
    "elu with scale or input_scale != 1 has no TensorRT activation" if tuple(n.args[2:4]) not in ((), (1,), (1, 1))
    else None))
def elu(ctx: Context, node, args):
    return ctx.net.activation(ctx.tensor(args[0]), "ELU", float(args[1]))


@converter("aten.hardtanh.default", validator=_float_only)
def hardtanh(ctx: Context, node, args):
    return ctx.net.activation(ctx.tensor(args[0]), "CLIP", float(args[1]), float(args[2]))


@converter("aten.softplus.default", validator=_float_only)
def softplus(ctx: Context, node, args):
    beta = float(args[1])
    return ctx.net.activation(ctx.tensor(args[0]), "SOFTPLUS", 1.0 / beta, beta)


@converter("aten.silu.default", validator=_float_only)
def silu(ctx: Context, node, args):
    x = ctx.tensor(args[0])
    return ctx.net.elementwise(x, ctx.net.activation(x, "SIGMOID"), "PROD")


@converter("aten.hardswish.default", validator=_float_only)
def hardswish(ctx: Context, node, args):
    x = ctx.tensor(args[0])
    return ctx.net.elementwise(x, ctx.net.activation(x, "HARD_SIGMOID", 1 / 6, 0.5), "PROD")


@converter("aten._to_copy.default")
def to_copy(ctx: Context, node, args):
    return ctx.net.cast(ctx.tensor(args[0]), ctx.out_dtype(node))


@converter("aten.clone.default", "aten.alias.default", "aten.detach.default", "aten.lift_fresh_copy.default",
           "aten.contiguous.default")
def identity(ctx: Context, node, args):
    return args[0]
