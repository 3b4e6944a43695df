"""``trtforge coverage MODEL_FACTORY``: the op table and the partitions, without building."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from trtforge.cli import app

runner = CliRunner()
pytestmark = pytest.mark.needs_trt  # the converter registry imports TensorRT's bindings


def test_coverage_lists_converted_unsupported_ops_and_partitions():
    result = runner.invoke(app, ["coverage", "custom_op_model:conv_jiggle_head", "--input-shape", "1x3x8x8",
                                 "--batch", "1:2:4", "--min-block-size", "2"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert any("trtforge_doubles.jiggle.default" in line and "unsupported" in line for line in lines)
    assert any("aten.convolution.default" in line and "converted" in line for line in lines)
    assert "2 engine partition(s)" in result.output  # before and after the custom op
    engines = [line for line in lines if line.strip().startswith("engine ")]
    assert "engine 0:" in engines[0] and "(convolution" in engines[0]  # in graph order
    assert "engine 1:" in engines[1] and "_softmax)" in engines[1]


def test_coverage_shows_a_refusal_with_its_reason():
    result = runner.invoke(app, ["coverage", "custom_op_model:nearest_grid_sample", "--input-shape", "2x3x5x5"])
    assert result.exit_code == 0, result.output
    refused = [line for line in result.output.splitlines() if "refused" in line and "grid_sampler_2d" in line]
    assert refused and "bilinear" in refused[0]


def test_coverage_of_an_onnx_file_is_one_line(tmp_path):
    result = runner.invoke(app, ["coverage", str(tmp_path / "m.onnx"), "--input-shape", "1x3"])
    assert result.exit_code == 2 and "not a file" in result.output and "Traceback" not in result.output
