"""The one batch rule: which inputs carry the batch on dim 0, for modules and ONNX files alike.

A static ONNX model builds as it is (as trtexec does); ``batch`` applies to dynamic dims only; a
module's input is batched only when its dim 0 is the shared batch; ``batched_inputs=`` says which.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

import trtforge
from trtforge.builder.profiles import resolve_profiles
from trtforge.capture.export import ExampleInputsError, ExportError, export_onnx
from trtforge.capture.onnx_file import graph_io, load_onnx
from trtforge.core.batch import BatchProfile, BatchSpecError, guess_batched
from trtforge.core.config import CompileConfig
from trtforge.core.ort_session import session
from trtforge.core.specs import TensorSpec


class MatMul(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


class CatArgs(torch.nn.Module):
    def forward(self, *xs: torch.Tensor) -> torch.Tensor:
        return torch.cat(xs, 1)


class SharedDim(torch.nn.Module):
    """``a + b.T``: dim 0 of both inputs is 3, but it is not a batch (b's dim 0 meets a's dim 1)."""

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a + b.transpose(0, 1)


class NonDividingPool(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pool = torch.nn.AdaptiveMaxPool1d(3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


def _fallback(caplog) -> bool:
    return any("falling back" in r.getMessage() for r in caplog.records)


def test_guess_batched_keeps_an_input_whose_dim0_differs_static():
    assert guess_batched([("a", (3, 4)), ("b", (4, 3))]) == ("a",)
    assert guess_batched([("a", (2, 3)), ("b", (2, 5)), ("s", ())]) == ("a", "b")
    assert guess_batched([("a", (2, 3))], chosen=()) == ()
    with pytest.raises(BatchSpecError, match=r"batched_inputs names unknown input\(s\) \['c'\]; inputs are a, b"):
        guess_batched([("a", (2, 3)), ("b", (2, 3))], chosen=("c",))


@pytest.mark.slow
def test_matmul_of_two_unbatched_inputs_exports_with_dynamo(tmp_path, caplog):
    a, b = torch.randn(3, 4), torch.randn(4, 3)
    with caplog.at_level(logging.WARNING, logger="trtforge.capture.export"):
        path = export_onnx(MatMul(), (a, b), tmp_path / "mm.onnx")
    assert not _fallback(caplog), [r.getMessage() for r in caplog.records]
    inputs, _ = graph_io(load_onnx(path))
    assert [(s.name, s.shape) for s in inputs] == [("a", (-1, 4)), ("b", (4, 3))]
    a5 = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    out = session(path).run(None, {"a": a5, "b": b.numpy()})[0]
    np.testing.assert_allclose(out, a5 @ b.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_star_args_forward_gets_matching_dynamic_shapes_and_stable_names(tmp_path, caplog):
    xs = (torch.randn(2, 3), torch.randn(2, 5))
    with caplog.at_level(logging.WARNING, logger="trtforge.capture.export"):
        path = export_onnx(CatArgs(), xs, tmp_path / "cat.onnx")
    assert not _fallback(caplog), [r.getMessage() for r in caplog.records]
    inputs, _ = graph_io(load_onnx(path))
    assert [(s.name, s.shape) for s in inputs] == [("xs_0", (-1, 3)), ("xs_1", (-1, 5))]
    x0, x1 = np.ones((4, 3), np.float32), np.zeros((4, 5), np.float32)
    np.testing.assert_array_equal(session(path).run(None, {"xs_0": x0, "xs_1": x1})[0],
                                  np.concatenate([x0, x1], 1))


@pytest.mark.slow
def test_a_shared_dim0_that_is_no_batch_exports_static_with_one_line(tmp_path, caplog):
    a, b = torch.randn(3, 3), torch.randn(3, 3)
    with caplog.at_level(logging.WARNING, logger="trtforge.capture.export"):
        path = export_onnx(SharedDim(), (a, b), tmp_path / "shared.onnx")
    inputs, _ = graph_io(load_onnx(path))
    assert [s.shape for s in inputs] == [(3, 3), (3, 3)]
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "\n" not in lines[0], lines
    assert "not one shared batch" in lines[0] and "batched_inputs=" in lines[0], lines[0]
    out = session(path).run(None, {"a": a.numpy(), "b": b.numpy()})[0]
    np.testing.assert_allclose(out, (a + b.T).numpy(), rtol=1e-6)


@pytest.mark.parametrize("module, shapes", [(SharedDim(), ((3, 3), (3, 3))), (MatMul(), ((3, 4), (4, 3)))],
                         ids=["specialised", "constraint-violation"])
@pytest.mark.slow
def test_an_asked_batch_that_cannot_hold_is_one_line(tmp_path, module, shapes):
    with pytest.raises(ExampleInputsError) as info:
        export_onnx(module, tuple(torch.randn(*s) for s in shapes), tmp_path / "s.onnx", batched_inputs=("a", "b"))
    message = str(info.value)
    assert "\n" not in message and "batched_inputs=" in message and "'b'" in message, message


@pytest.mark.slow
def test_non_dividing_adaptive_pooling_is_one_line_naming_the_op(tmp_path):
    with pytest.raises(ExportError) as info:
        export_onnx(NonDividingPool(), (torch.randn(1, 2, 8),), tmp_path / "pool.onnx")
    message = str(info.value)
    assert "\n" not in message, message
    assert "adaptive_max_pool1d" in message and "divide" in message, message
    assert len(message) < 400, message


def _static_model(tmp_path, name: str = "static3") -> str:
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4]),
         helper.make_tensor_value_info("w", TensorProto.FLOAT, [4, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])],
    )
    path = tmp_path / f"{name}.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return str(path)


def test_a_static_batch3_onnx_model_builds_as_it_is_by_default(tmp_path):
    art = trtforge.compile(_static_model(tmp_path), precision="fp32", output_dir=tmp_path, progress=False,
                           cache=False)
    assert [s.shape for s in art.sidecar.inputs] == [(3, 4), (4, 2)]
    assert CompileConfig().batch is None


def test_batch_applies_only_to_dynamic_dims():
    x = TensorSpec("x", "float32", (-1, 4))
    w = TensorSpec("w", "float32", (4, 2))
    (profile,) = resolve_profiles([x, w], (BatchProfile(1, 8, 32),))
    assert profile == {"x": {"min": [1, 4], "opt": [8, 4], "max": [32, 4]},
                       "w": {"min": [4, 2], "opt": [4, 2], "max": [4, 2]}}
    (default,) = resolve_profiles([x, w], None)
    assert default["x"] == {"min": [1, 4], "opt": [1, 4], "max": [1, 4]}
    with pytest.raises(BatchSpecError, match="fixed batch 3 but batch=.1:8:32. was asked; pass dynamic_batch=True"):
        resolve_profiles([TensorSpec("x", "float32", (3, 4))], (BatchProfile(1, 8, 32),))
    with pytest.raises(BatchSpecError, match="'w' is in batched_inputs but its dim 0 is fixed at 4"):
        resolve_profiles([x, w], (BatchProfile(1, 8, 32),), batched=("x", "w"))
    with pytest.raises(BatchSpecError, match="'x' has a dynamic dim 0 but is not in batched_inputs"):
        resolve_profiles([x, w], None, batched=())


def test_the_cli_builds_a_static_model_as_it_is_and_names_batched_inputs(tmp_path):
    from typer.testing import CliRunner

    from trtforge.cli import app

    runner = CliRunner()
    model = _static_model(tmp_path, "cli_static")
    result = runner.invoke(app, ["build", model, "--precision", "fp32", "-o", str(tmp_path / "out"), "--quiet",
                                 "--no-cache"])
    assert result.exit_code == 0, result.output
    refused = runner.invoke(app, ["build", model, "--batched-input", "x", "-o", str(tmp_path / "out2"), "--quiet"])
    assert refused.exit_code == 2, refused.output
    assert "'x' is in batched_inputs but its dim 0 is fixed at 3" in refused.output
