"""Convert a module, run the recorded network through the reference evaluator, compare with PyTorch,
and build the same network with TensorRT-RTX.

Example:
    >>> check(nn.Conv2d(3, 8, 3), lambda b: (torch.randn(b, 3, 8, 8),))
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from trtforge.convert.api import build_lowered, lower_module
from trtforge.convert.evaluator import evaluate

TOLERANCES = {"fp32": {"rtol": 1e-4, "atol": 1e-4}, "fp16": {"rtol": 2e-2, "atol": 2e-2}}


class Fn(nn.Module):
    """A module around a function of tensors (for one-op tests)."""

    def __init__(self, fn: Callable) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


def _flat(value) -> list[torch.Tensor]:
    return list(value) if isinstance(value, (tuple, list)) else [value]


def check(model: nn.Module, make_inputs: Callable[[int], tuple], *, dynamic: bool = True, precision: str = "fp32",
          build: bool = True, batch: tuple[int, int, int] = (1, 2, 4), eval_batch: int = 3, tolerance=None):
    """Lower ``model`` (dim 0 dynamic over ``batch`` when ``dynamic``), evaluate at ``eval_batch``, compare
    every output with PyTorch, then build the network; returns the Lowered result."""
    model = model.eval()
    lowered = lower_module(model, make_inputs(batch[1]), batch=batch if dynamic else None, precision=precision)
    inputs = make_inputs(eval_batch if dynamic else batch[1])
    names = [name for name, _d, _s in lowered.net.record.inputs]
    with torch.no_grad():
        expected = _flat(model(*inputs))
    got = evaluate(lowered.net.record, dict(zip(names, inputs, strict=True)))
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        assert g.dtype == e.dtype, (g.dtype, e.dtype)
        if e.dtype.is_floating_point:
            torch.testing.assert_close(g, e, **(tolerance or TOLERANCES[precision]))
        else:
            torch.testing.assert_close(g, e)
    if build:
        plan = build_lowered(lowered.net, batch if dynamic else (batch[1],) * 3, optimization_level=0)
        assert len(plan.plan) > 0
    return lowered
