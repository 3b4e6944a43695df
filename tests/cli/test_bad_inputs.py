"""Every bad input named in the foundation issue gets a clear error before any build starts."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from onnx import TensorProto, helper

import trtforge
from trtforge.builder.build import OnnxParseError
from trtforge.capture.export import ExampleInputsError
from trtforge.capture.onnx_file import NotOnnxError
from trtforge.core.batch import BatchSpecError
from trtforge.core.config import ConfigError


@pytest.fixture()
def no_build(monkeypatch):
    """Fail the test if a build starts: every refusal must come before it."""

    def forbidden(*args, **kwargs):
        raise AssertionError("build_engine was called; the error should have come first")

    monkeypatch.setattr("trtforge.pipeline.onnx_path.build_engine", forbidden)


@pytest.fixture()
def tiny_onnx(tmp_path) -> Path:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
    )
    path = tmp_path / "tiny.onnx"
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]).SerializeToString())
    return path


def test_missing_file(tmp_path, no_build):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        trtforge.compile(tmp_path / "nope.onnx", output_dir=tmp_path)


def test_not_onnx(tmp_path, no_build):
    bogus = tmp_path / "photo.onnx"
    bogus.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4)
    with pytest.raises(NotOnnxError, match="is not an ONNX model"):
        trtforge.compile(bogus, output_dir=tmp_path / "out", progress=False)


def test_example_inputs_do_not_fit_forward(tmp_path, no_build):
    model = torch.nn.Linear(4, 2)
    with pytest.raises(ExampleInputsError, match="do not fit"):
        trtforge.compile(model, (torch.zeros(1, 4), torch.zeros(1, 4)), output_dir=tmp_path)
    with pytest.raises(ExampleInputsError, match="shape and dtype the model expects"):
        trtforge.compile(model, (torch.zeros(1, 7),), output_dir=tmp_path, progress=False)
    with pytest.raises(ExampleInputsError, match="needs example_inputs"):
        trtforge.compile(model, None, output_dir=tmp_path)


@pytest.mark.parametrize(
    ("batch", "message"),
    [((8, 4, 16), "min <= opt <= max"), ((1, 32, 16), "min <= opt <= max"), (0, "positive integer"),
     ("1:x:3", "integers"), ("1:2", "min:opt:max"), ([(1, 1, 1), (0, 1, 2)], "positive integer")],
)
def test_bad_batch_specs(tiny_onnx, tmp_path, no_build, batch, message):
    with pytest.raises(BatchSpecError, match=message):
        trtforge.compile(tiny_onnx, batch=batch, output_dir=tmp_path)


def test_unknown_precision_and_target(tiny_onnx, tmp_path, no_build):
    with pytest.raises(ConfigError, match="unknown precision 'fp8'.*fp32, fp16, bf16, int8"):
        trtforge.compile(tiny_onnx, precision="fp8", output_dir=tmp_path)
    with pytest.raises(ConfigError, match=r"unknown target\(s\) \['sm99'\].*sm86"):
        trtforge.compile(tiny_onnx, targets=["sm99"], output_dir=tmp_path)


def test_output_dir_not_writable(tiny_onnx, tmp_path, no_build):
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    with pytest.raises(NotADirectoryError, match="is a file"):
        trtforge.compile(tiny_onnx, output_dir=a_file)
    with pytest.raises(PermissionError, match="not writable"):
        trtforge.compile(tiny_onnx, output_dir="/proc/trtforge_out")


@pytest.mark.parametrize("name", ["sub/model", "..\\model"])
def test_name_with_path_separator(tiny_onnx, tmp_path, no_build, name):
    with pytest.raises(ValueError, match="path separator"):
        trtforge.compile(tiny_onnx, name=name, output_dir=tmp_path)


def test_empty_name_says_empty(tiny_onnx, tmp_path, no_build):
    """issue 15: ``--name ''`` reported "path separator"."""
    with pytest.raises(ValueError, match="is empty"):
        trtforge.compile(tiny_onnx, name="", output_dir=tmp_path)


def test_int8_without_calibration_data(tiny_onnx, tmp_path, no_build):
    with pytest.raises(ConfigError, match="needs calibration_data"):
        trtforge.compile(tiny_onnx, precision="int8", output_dir=tmp_path)


def test_parser_rejection_names_the_node(tmp_path):
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["h"], name="ok_relu"),
         helper.make_node("FancyUnknownOp", ["h"], ["y"], name="my_custom_node", domain="com.example")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20), helper.make_opsetid("com.example", 1)])
    path = tmp_path / "custom.onnx"
    path.write_bytes(model.SerializeToString())
    with pytest.raises(OnnxParseError, match="my_custom_node.*FancyUnknownOp") as info:
        trtforge.compile(path, precision="fp32", output_dir=tmp_path / "out", progress=False)
    assert info.value.failures[0][0] == "my_custom_node"
    assert not list((tmp_path / "out").glob("*.engine"))  # nothing half-written


def test_refuses_to_overwrite_foreign_files(tiny_onnx, tmp_path):
    (tmp_path / "tiny_fp16.json").write_text('{"mine": true}')
    with pytest.raises(FileExistsError, match="tiny_fp16.json.*not written by trtforge"):
        trtforge.compile(tiny_onnx, output_dir=tmp_path, progress=False)
    (tmp_path / "tiny_fp16.json").unlink()
    (tmp_path / "tiny_fp16.engine").write_bytes(b"someone else's engine")
    with pytest.raises(FileExistsError, match="tiny_fp16.engine exists without a trtforge sidecar"):
        trtforge.compile(tiny_onnx, output_dir=tmp_path, progress=False)
    assert (tmp_path / "tiny_fp16.engine").read_bytes() == b"someone else's engine"


def test_unsupported_model_type(tmp_path, no_build):
    with pytest.raises(TypeError, match="torch.nn.Module or a path to an .onnx file, not dict"):
        trtforge.compile({"weights": 1}, output_dir=tmp_path)


def test_unknown_option_lists_the_valid_ones(tiny_onnx, tmp_path, no_build):
    with pytest.raises(TypeError, match=r"unknown option\(s\) precison; CompileConfig's options are precision, batch"):
        trtforge.compile(tiny_onnx, precison="fp16", output_dir=tmp_path)


def test_a_config_and_overrides_combine(tiny_onnx, tmp_path, no_build):
    config = trtforge.CompileConfig(precision="fp32", targets=["sm99"])
    with pytest.raises(ConfigError, match=r"unknown target\(s\) \['sm99'\]"):
        trtforge.compile(tiny_onnx, None, config, output_dir=tmp_path)
    with pytest.raises(ConfigError, match="optimization_level=9 must be 0..5"):
        trtforge.compile(tiny_onnx, None, config, targets=(), optimization_level=9, output_dir=tmp_path)
