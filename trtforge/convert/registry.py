"""The converter registry, as data: ATen target name → ``Converter`` (function, validator, family).

A converter is ``fn(ctx, node, args) -> output(s)``; ``args`` are the op's schema arguments in order,
defaults filled in, FX nodes replaced by their converted values. A validator ``fn(node, settings) -> str |
None`` (``fn(node)`` when the settings do not matter) looks at the node's example values
(``node.meta["val"]``) and the conversion's ``Settings`` (the compute precision) before anything is built,
and returns the reason it refuses (dtype, rank, dynamic dim, unsupported attribute, precision), or None.

Example:
    >>> @converter("aten.relu.default")
    ... def relu(ctx, node, args):
    ...     return ctx.net.activation(ctx.tensor(args[0]), "RELU")
    >>> REGISTRY["aten.relu.default"].family
    'elementwise'
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass

import torch

from trtforge.core.errors import InternalError

#: ``(node, settings) -> reason | None``, or ``(node) -> reason | None`` when the settings do not matter.
Validator = Callable[..., "str | None"]


@dataclass(frozen=True)
class Settings:
    """What a validator may consult besides the node (as Torch-TensorRT's ``capability_validator(node,
    settings)``): the dtype the network computes its float tensors in."""

    compute: torch.dtype = torch.float32


DEFAULT_SETTINGS = Settings()


@functools.cache
def takes_settings(validator: Callable) -> bool:
    """Whether ``validator`` takes ``(node, settings)`` rather than ``(node)``."""
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return len([p for p in inspect.signature(validator).parameters.values() if p.kind in kinds]) >= 2


@dataclass(frozen=True)
class Converter:
    """One registered converter: the ATen target, its function, validator and op family (module)."""

    target: str
    fn: Callable
    validator: Validator | None
    family: str

    def refusal(self, node: torch.fx.Node, settings: Settings = DEFAULT_SETTINGS) -> str | None:
        """The validator's reason to refuse ``node`` under ``settings``, or None when the converter takes it."""
        if self.validator is None:
            return None
        return self.validator(node, settings) if takes_settings(self.validator) else self.validator(node)


#: Every converter, by ATen target name ("aten.convolution.default", "_operator.getitem", ...).
REGISTRY: dict[str, Converter] = {}


def converter(*targets: str, validator: Validator | None = None, replace: bool = False) -> Callable[[Callable], Callable]:
    """Register the decorated function for each of ``targets``; the family is the module's last name.

    Users register their own converters the same way, from their own module (imported before
    ``compile(path="direct")``; the CLI imports the factory's module): ``replace=True`` takes the place
    of a built-in converter of that target. Either way the converter's source joins the engine-cache key.
    """

    def register(fn: Callable) -> Callable:
        family = fn.__module__.rsplit(".", 1)[-1]
        for target in targets:
            if target in REGISTRY and not replace:
                _refuse_twice(target, REGISTRY[target].fn, fn)
            REGISTRY[target] = Converter(target, fn, validator, family)
        return fn

    return register


def _refuse_twice(target: str, old: Callable, new: Callable) -> None:
    if new.__module__.split(".")[0] == "trtforge":
        raise InternalError(f"two converters for {target}: {old} and {new}")
    from trtforge.core.errors import InvalidArgument

    raise InvalidArgument(f"{target} already has a converter ({old.__module__}.{old.__qualname__}); pass "
                          f"converter({target!r}, replace=True) to use {new.__qualname__} instead")


def target_name(node: torch.fx.Node) -> str:
    """The registry key of an FX node: ``aten.add.Tensor`` or ``_operator.mul`` for SymInt math."""
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        return str(target)
    return f"{getattr(target, '__module__', '') or ''}.{getattr(target, '__name__', str(target))}"
