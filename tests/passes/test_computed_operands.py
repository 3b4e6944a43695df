"""Issue 20, build item 5: a Div by a computed divisor and a Pow with a computed exponent stay FP32 under
the FP16 cast pass. torch2trt's div and pow tests (both operands network inputs) read 0 error in ONNX
Runtime, which computes FP16 nodes in FP32, and inf in the strict evaluator, which computes each node in
its declared type: the range probe sees only the example inputs, so the rule must not depend on it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from trtforge.capture.export import export_onnx
from trtforge.passes.evaluate import float_errors
from trtforge.passes.float16 import convert_float, plan_float
from trtforge.passes.graph import copy_model, load_ir


class Div(torch.nn.Module):  # torch2trt test_div_basic: x / y, both inputs
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x / y


class Pow(torch.nn.Module):  # torch2trt test_pow_basic: x ** y, both inputs
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x ** y


class DivByConstant(torch.nn.Module):  # a scale: FP16 as before
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.relu(x / 4.0 + y)


# Inputs no example showed: a divisor near 0, an exponent that takes 10 past 65504.
FEEDS = {
    "div": {"x": np.array([[100.0, 1.0, -3.0]], np.float32), "y": np.array([[1e-3, 2.0, 0.5]], np.float32)},
    "pow": {"x": np.array([[10.0, 2.0, 1.5]], np.float32), "y": np.array([[6.0, 3.0, 2.0]], np.float32)},
}


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "module", "op"), [("div", Div, "Div"), ("pow", Pow, "Pow")])
def test_computed_operand_stays_fp32_and_the_strict_evaluator_agrees(tmp_path, kind, module, op):
    example = (torch.ones(1, 3), torch.full((1, 3), 2.0))
    reference = load_ir(export_onnx(module().eval(), example, tmp_path / f"{kind}.onnx", input_names=["x", "y"]))
    plan = plan_float(copy_model(reference), "float16")
    kept = {n.op_type for n in reference.graph if n.name in plan.fp32_nodes}
    assert op in kept, plan.fp32_nodes
    errors = float_errors(reference, convert_float(copy_model(reference), "float16"), FEEDS[kind])
    assert errors["strict"] < 1e-2, errors  # before: inf (the quotient / power overflowed FP16)
    # BF16 has FP32's range: the rule is about FP16 only.
    assert op not in {n.op_type for n in reference.graph
                      if n.name in plan_float(copy_model(reference), "bfloat16").fp32_nodes}


@pytest.mark.slow
def test_division_by_a_constant_stays_fp16(tmp_path):
    example = (torch.ones(1, 3), torch.ones(1, 3))
    reference = load_ir(export_onnx(DivByConstant().eval(), example, tmp_path / "c.onnx", input_names=["x", "y"]))
    plan = plan_float(copy_model(reference), "float16")
    assert not [n for n in reference.graph if n.name in plan.fp32_nodes and n.op_type in ("Div", "Mul")], plan
