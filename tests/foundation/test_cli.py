"""The ``trtforge`` command: build, inspect (with the hash check) and clear errors."""

from __future__ import annotations

import json

from onnx import TensorProto, helper
from typer.testing import CliRunner

from trtforge.cli import app

runner = CliRunner()


def _tiny(tmp_path):
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[1, 1, 1, 1])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4, 16, 16])],
        [helper.make_tensor("w", TensorProto.FLOAT, [4, 3, 3, 3], [0.1] * 108)],
    )
    path = tmp_path / "conv.onnx"
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]).SerializeToString())
    return path


def test_build_then_inspect(tmp_path):
    model = _tiny(tmp_path)
    out = tmp_path / "out"
    result = runner.invoke(app, ["build", str(model), "--precision", "fp16", "--batch", "1:8:32",
                                 "--target", "sm89", "-o", str(out), "--quiet"])
    assert result.exit_code == 0, result.output
    (sidecar,) = out.glob("conv_fp16*.json")  # a target may add a file-name suffix
    engine = sidecar.with_suffix(".engine")
    data = json.loads(sidecar.read_text())
    assert data["builder"]["targets"] == ["sm89"]
    assert data["profiles"][0]["x"]["max"] == [32, 3, 16, 16]
    shown = runner.invoke(app, ["inspect", str(engine)])
    assert shown.exit_code == 0, shown.output
    assert "sha256 OK" in shown.output and "1×3×16×16" in shown.output and "32×3×16×16" in shown.output
    engine.write_bytes(engine.read_bytes()[:-10])
    tampered = runner.invoke(app, ["inspect", str(sidecar)])
    assert tampered.exit_code == 1
    assert "does not match its sidecar" in tampered.output


def test_bad_input_is_one_clear_line(tmp_path):
    result = runner.invoke(app, ["build", str(_tiny(tmp_path)), "--batch", "8:4:16", "-o", str(tmp_path)])
    assert result.exit_code == 2
    assert "min <= opt <= max" in result.output
    assert "Traceback" not in result.output
    missing = runner.invoke(app, ["inspect", str(tmp_path / "none.json")])
    assert missing.exit_code == 2 and "no sidecar" in missing.output
