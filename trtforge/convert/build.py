"""Build a converted network into a serialized TensorRT plan (one optimisation profile over the batch).

Example:
    >>> plan = build_plan(lowered.net, batch=(1, 8, 32))
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from trtforge.builder.build import BuildFailedError
from trtforge.builder.native_output import native_output_to_log
from trtforge.convert.network import Network


@dataclass(frozen=True)
class PlanResult:
    """A serialized plan and how long TensorRT took to build it."""

    plan: bytes
    seconds: float


def profile_shapes(net: Network, batch: tuple[int, int, int]) -> dict[str, dict[str, list[int]]]:
    """The one optimisation profile over ``batch`` as the sidecar writes it: {input: {min, opt, max}}.

    Example:
        >>> profile_shapes(lowered.net, (1, 8, 32))["x"]["max"]
        [32, 3, 224, 224]
    """
    profile = {}
    for name, _dtype, shape in net.record.inputs:
        exprs = net.dynamic_dims.get(name, shape)
        triple = [[_size(e, d, b) for e, d in zip(exprs, shape, strict=True)] for b in batch]
        profile[name] = dict(zip(("min", "opt", "max"), triple, strict=True))
    return profile


def _profile(builder, net: Network, batch: tuple[int, int, int]):
    profile = builder.create_optimization_profile()
    for name, shapes in profile_shapes(net, batch).items():
        profile.set_shape(name, *(tuple(shapes[k]) for k in ("min", "opt", "max")))
    return profile


def _size(expr, dim: int, batch: int) -> int:
    """A profile size: static dims as they are; a batch expression (``s0``, ``4*s0``) at ``batch``."""
    if dim != -1:
        return dim
    if isinstance(expr, int):
        return batch
    return int(expr.subs({symbol: batch for symbol in expr.free_symbols}))


def build_plan(net: Network, batch: tuple[int, int, int] = (1, 1, 1), optimization_level: int = 3) -> PlanResult:
    """Build ``net`` with TensorRT (on the CPU with TensorRT-RTX); raises BuildFailedError with the log."""
    cfg = net.builder.create_builder_config()
    cfg.builder_optimization_level = optimization_level
    if any(-1 in shape for _n, _d, shape in net.record.inputs):
        cfg.add_optimization_profile(_profile(net.builder, net, batch))
    start = time.perf_counter()
    with native_output_to_log():
        plan = net.builder.build_serialized_network(net.net, cfg)
    if plan is None:
        raise BuildFailedError(f"TensorRT could not build {net.net.name}: "
                               + ("; ".join(net.logger.errors()) or "no error was logged"))
    return PlanResult(bytes(plan), time.perf_counter() - start)
