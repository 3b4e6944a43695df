"""Honest INT8: a build plans its quantized layers for its target GPUs before any work, refuses in one
line what no target accelerates, and, when allowed, records what runs as what (real TensorRT-RTX builds)."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from typer.testing import CliRunner

import trtforge
from trtforge.builder.precision_plan import Unaccelerated
from trtforge.cli import app
from trtforge.core import trt
from trtforge.core.config import CompileConfig

pytestmark = pytest.mark.skipif(not trt.available() or not trt.info().is_rtx, reason="needs TensorRT-RTX")
runner = CliRunner()
LINE = ("TensorRT-RTX runs INT8 only as weight-only GEMM: INT8 (W8A8) convolutions and GEMMs would run as fp16 on "
        "sm86, sm89, sm120, sm121 (no target accelerates them); use --precision int8-wo, --precision fp8 --target "
        "sm89,sm120, or full TensorRT for W8A8")


@pytest.fixture
def calib(tmp_path):
    path = tmp_path / "calib.npy"
    np.save(path, np.random.default_rng(0).normal(size=(24, 3, 16, 16)).astype(np.float32))
    return path


def test_int8_with_default_targets_exits_2_with_one_line_and_writes_nothing(tiny_onnx, calib, tmp_path):
    out = tmp_path / "out"
    result = runner.invoke(app, ["build", str(tiny_onnx), "--precision", "int8", "--calib", str(calib), "-o", str(out)])
    assert result.exit_code == 2, result.output
    assert LINE in " ".join(result.output.split())
    assert "Traceback" not in result.output
    assert not out.exists()


def test_allow_unaccelerated_builds_and_the_sidecar_and_inspect_say_what_runs_as_what(tiny_onnx, calib, tmp_path):
    out = tmp_path / "out"
    result = runner.invoke(app, ["build", str(tiny_onnx), "--precision", "int8", "--calib", str(calib), "-o", str(out),
                                 "--allow-unaccelerated", "--include", "Conv", "--include", "Gemm", "-q"])
    assert result.exit_code == 0, result.output
    sidecar = json.loads(next(out.glob("*_int8.json")).read_text())
    plan = sidecar["target_plan"]
    assert plan["targets"] == ["sm86", "sm89", "sm120", "sm121"] and plan["allow_unaccelerated"] is True
    by_op = {layer["op"]: layer for layer in plan["layers"]}
    assert set(by_op) == {"Conv", "Gemm"}  # read from the Q/DQ graph TensorRT was handed
    assert all(layer["quantized_as"] == "int8" and set(layer["runs_as"].values()) == {"fp16"}
               for layer in plan["layers"])
    assert sorted(plan["unaccelerated"]) == sorted(layer["layer"] for layer in plan["layers"])
    assert any(note.startswith("allow_unaccelerated: 2 quantized layer(s)") for note in sidecar["notes"])
    shown = runner.invoke(app, ["inspect", str(next(out.glob("*_int8.json")))], terminal_width=200)
    assert "quantized layers on each target" in shown.output and "sm121" in shown.output, shown.output


def _fp8_matmul(path):
    """A model quantized elsewhere (FLOAT8E4M3FN Q/DQ on a MatMul, opset 19), handed to trtforge as is."""
    inits = [helper.make_tensor("w", TensorProto.FLOAT8E4M3FN, [32, 16], [0.5] * 512),
             numpy_helper.from_array(np.array(0.25, np.float32), "ws"),
             numpy_helper.from_array(np.array(0.05, np.float32), "xs"),
             helper.make_tensor("xz", TensorProto.FLOAT8E4M3FN, [], [0.0])]
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w", "ws"], ["wd"]),
             helper.make_node("MatMul", ["xd", "wd"], ["y"], name="proj")]
    graph = helper.make_graph(nodes, "fp8", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 16])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=10), path)
    return path


def test_a_prequantized_fp8_graph_is_planned_from_its_qdq(tmp_path):
    model = _fp8_matmul(tmp_path / "fp8.onnx")
    with pytest.raises(Unaccelerated, match=r"FP8 .*cannot be built for sm86 .*HW-specific datatype"):
        trtforge.compile(model, precision="fp32", targets=["sm86", "sm89"], output_dir=tmp_path / "a", progress=False)
    assert not any((tmp_path / "a").glob("*.engine"))
    art = trtforge.compile(model, precision="fp32", targets=["sm89", "sm120"], output_dir=tmp_path / "b",
                           progress=False)
    plan = art.sidecar.target_plan
    assert [dict(layer["runs_as"]) for layer in plan.layers] == [{"sm89": "fp8", "sm120": "fp8"}]
    assert plan.unaccelerated == ()


def test_allow_unaccelerated_is_an_option_of_the_cache_key():
    assert CompileConfig(allow_unaccelerated=True).key_fields()["allow_unaccelerated"] is True
    assert CompileConfig().key_fields() != CompileConfig(allow_unaccelerated=True).key_fields()
