"""``trtforge inspect MODEL.onnx``: ops, I/O with dynamic dims, dtypes, Q/DQ coverage, parser refusals."""

from __future__ import annotations

import pytest
from onnx import TensorProto, helper
from typer.testing import CliRunner

from trtforge.cli import app
from trtforge.core import trt
from trtforge.debug.onnx_inspect import describe_onnx

runner = CliRunner()
needs_trt = pytest.mark.skipif(not trt.available(), reason="no TensorRT bindings installed")


def _custom_op_model(path):
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["h"], name="ok_relu"),
         helper.make_node("FancyUnknownOp", ["h"], ["z"], name="my_custom_node", domain="com.example"),
         helper.make_node("Relu", ["z"], ["y"], name="after")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20), helper.make_opsetid("com.example", 1)])
    path.write_bytes(model.SerializeToString())
    return path


@needs_trt
def test_a_node_the_parser_refuses_is_named(tmp_path):
    path = _custom_op_model(tmp_path / "custom.onnx")
    info = describe_onnx(path)
    assert [r[:2] for r in info.refused] == [("my_custom_node", "FancyUnknownOp")]
    result = runner.invoke(app, ["inspect", str(path)])
    assert result.exit_code == 1, result.output
    assert "my_custom_node" in result.output and "FancyUnknownOp" in result.output
    assert "batch×4" in result.output  # the dynamic dim keeps its name


def _training_batchnorm_model(path):
    """A BatchNormalization in training mode with its running-stat outputs, as TorchScript writes a weight-
    standardized conv (transformers' BiT): ONNX Runtime runs it, TensorRT's parser refuses it."""
    from onnx import numpy_helper

    init = [numpy_helper.from_array(__import__("numpy").full(4, v, "float32"), n)
            for n, v in (("scale", 1.0), ("bias", 0.0), ("mean", 0.0), ("var", 1.0))]
    node = helper.make_node("BatchNormalization", ["x", "scale", "bias", "mean", "var"], ["y", "rm", "rv"],
                            name="weight_standardization", training_mode=1)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 3, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 3, 3])], init)
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    return path


@needs_trt
def test_parser_refusals_end_in_one_error_line_naming_the_fix(tmp_path):
    """The refused-nodes table is followed by one ``error:`` line (the build's refusal, in CLI terms), and none of
    TensorRT's own parser log lines (a BiT exported by TorchScript printed 72 'error: TensorRT error' lines, or in
    a long-lived process none, exiting 1 without saying why)."""
    from cli_in_process import run

    path = _training_batchnorm_model(tmp_path / "bn.onnx")
    done = run(["inspect", path.name], cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, done.stderr
    assert "cannot parse bn.onnx: node 'weight_standardization' (BatchNormalization)" in errors[0]
    assert "--outputs NAME[,NAME]" in errors[0] and "outputs=[" not in errors[0]
    assert "weight_standardization" in done.stdout  # the table still lists the node


@needs_trt
def test_lite0_fp32_and_its_int8_graph(lite0_onnx, tmp_path):
    info = describe_onnx(lite0_onnx)
    assert info.refused == [] and info.ops["Conv"] == 49 and info.qdq_pairs == 0
    assert info.inputs[0][0] == "images" and info.inputs[0][2][1:] == ("3", "224", "224")
    assert info.inputs[0][2][0] not in ("1", "3")  # the exported batch dim is dynamic
    result = runner.invoke(app, ["inspect", str(lite0_onnx)])
    assert result.exit_code == 0, result.output
    assert "accepts every node" in result.output and "Conv 49" in result.output and "not quantized" in result.output


@pytest.mark.parametrize("argv, fix", [
    (["inspect", "{missing}"], "pass trtforge inspect an existing .onnx file, an .engine or its .json sidecar"),
    (["debug", "precision", "{missing}", "--precision", "fp16"],
     "pass trtforge debug precision an existing FP32 .onnx file or an artifact's .json sidecar"),
    (["compare", "--layerwise", "{missing}", "{missing}"], "--layerwise compares two existing .onnx files"),
])
def test_a_missing_onnx_file_is_one_line_naming_the_fix_in_cli_terms(tmp_path, argv, fix):
    missing = tmp_path / "nope.onnx"
    result = runner.invoke(app, [a.format(missing=missing) for a in argv])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: no ONNX file at {missing}; "), result.output
    assert fix in lines[0]


def test_a_missing_onnx_file_names_the_fix_in_python_terms(tmp_path):
    from trtforge.core.errors import MissingFile
    from trtforge.debug.bisect import bisection_inputs

    missing = tmp_path / "nope.onnx"
    with pytest.raises(MissingFile, match=r"describe_onnx\(path='.*nope.onnx'\): no ONNX file there; pass the path "
                                          r"of an existing \.onnx file"):
        describe_onnx(missing)
    with pytest.raises(MissingFile, match=r"bisection_inputs\(model='.*nope.onnx'\): no ONNX file there; pass the "
                                          r"path of an existing FP32 \.onnx file or of an artifact's \.json sidecar"):
        bisection_inputs(missing, None, None, 8, 8)
