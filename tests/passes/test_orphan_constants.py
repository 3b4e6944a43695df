"""Issue 35 item 1: a cleanup pass left a constant no graph defines (onnxscript's Flatten→Reshape rule names its
shape ``{input}/shape``, so two Flattens of one tensor clobber each other's initializer), and every build of such
a file failed in ``copy_model`` with a ~37 kB "outer-scope value" line. A TorchScript export with both Flattens
of one tensor and an ``If`` (a detector's head does the same) now builds at FP16, INT8 and with --dynamic-batch
(its rows equal batch-1 runs of the file); the cleaned graph computes what ONNX Runtime computes on the file."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from cli_in_process import run

from trtforge.capture.onnx_file import load_onnx
from trtforge.core.ort_session import session
from trtforge.passes.cleanup import orphan_inputs
from trtforge.passes.graph import copy_model, proto_bytes
from trtforge.passes.process import reference_graph

pytestmark = pytest.mark.needs_trt


class TwoFlattens(torch.nn.Module):
    """``f`` flattened twice (Flatten axis 1 for the classifier, axis -1 for per-row maxima) and a data-dependent ``if``."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.cls = torch.nn.Linear(4 * 8 * 8, 5)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        f = self.conv(x)
        scores = self.cls(torch.flatten(f, 1))
        rows = torch.flatten(f, 0, -2).amax(dim=1).reshape(x.shape[0], -1)
        if bool(scores.max() > 0):
            rows = rows * 2.0
        return scores, rows


@pytest.fixture(scope="module")
def two_flattens(tmp_path_factory) -> Path:
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("orphan") / "two_flattens.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(torch.jit.script(TwoFlattens().eval()), (torch.randn(1, 3, 8, 8),), str(path),
                          opset_version=17, dynamo=False, input_names=["x"], output_names=["scores", "rows"])
    return path


def test_cleanup_defines_every_value_and_keeps_the_numbers(two_flattens):
    reference = reference_graph(load_onnx(two_flattens))
    assert orphan_inputs(reference) == []
    copy_model(reference)  # raised "... is an outer-scope value" on the orphaned Reshape shape
    x = {"x": np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)}
    for got, want in zip(session(proto_bytes(reference)).run(None, x), session(two_flattens).run(None, x), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_fp16_int8_and_dynamic_batch_builds_of_the_file(two_flattens, tmp_path):
    np.save(tmp_path / "calib.npy", np.random.default_rng(1).standard_normal((4, 3, 8, 8)).astype(np.float32))
    for flags in (["--precision", "fp16"],
                  ["--precision", "int8", "--calib", tmp_path / "calib.npy", "--allow-unaccelerated"]):
        done = run(["build", two_flattens, *flags, "-o", tmp_path / flags[1], "-q"])
        assert done.returncode == 0, done.stderr[-2000:]
    done = run(["build", two_flattens, "--dynamic-batch", "--batch", "1:2:3", "--opt-level", "0", "-o", tmp_path / "dyn",
                "-q"])
    assert done.returncode == 0, done.stderr[-2000:]  # was refused: the If's branches kept the exporter's [1, 32]
    x = np.random.default_rng(2).standard_normal((3, 3, 8, 8)).astype(np.float32)
    together = session(tmp_path / "dyn" / "two_flattens_reference_fp32.onnx").run(None, {"x": x})
    alone = [session(two_flattens).run(None, {"x": x[i:i + 1]}) for i in range(3)]
    for whole, parts in zip(together, zip(*alone, strict=True), strict=True):  # the If's test: every row's max > 0
        np.testing.assert_allclose(whole, np.concatenate(parts), rtol=1e-5, atol=1e-6)


def test_a_model_with_an_orphan_is_refused_naming_the_value(tmp_path):
    """onnxscript's optimizer alone (without trtforge's cleanup) leaves the orphan; copying that model names it
    in one short line instead of onnx_ir's message with the whole graph in it."""
    import onnxscript.optimizer
    from onnx import TensorProto, helper

    from trtforge.core.errors import InternalError
    from trtforge.passes.graph import load_ir

    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Flatten", ["r"], ["a"], axis=1),
             helper.make_node("Flatten", ["r"], ["b"], axis=3), helper.make_node("ReduceSum", ["a"], ["sa"]),
             helper.make_node("ReduceSum", ["b"], ["sb"]), helper.make_node("Add", ["sa", "sb"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 3, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1])])
    model = load_ir(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    onnxscript.optimizer.optimize_ir(model)
    with pytest.raises(InternalError, match=r"reads value 'r/shape(_1)?', which no graph defines") as refused:
        copy_model(model)
    assert len(str(refused.value)) < 400
