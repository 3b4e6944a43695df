"""``trtforge coverage MODEL_FACTORY``: the op table and the partitions, without building."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from trtforge.cli import app

runner = CliRunner()
pytestmark = pytest.mark.needs_trt  # the converter registry imports TensorRT's bindings


def _row(output: str, first: str) -> list[str]:
    """The cells of the table row whose first cell is ``first``."""
    for line in output.splitlines():
        cells = [c.strip() for c in line.strip("│┃ ").split("│")]
        if cells and cells[0] == first:
            return cells
    raise AssertionError(f"no row {first!r} in:\n{output}")


@pytest.mark.slow
def test_coverage_lists_converted_unsupported_ops_and_partitions():
    result = runner.invoke(app, ["coverage", "custom_op_model:conv_jiggle_head", "--input-shape", "1x3x8x8",
                                 "--batch", "1:2:4", "--min-block-size", "2"])
    assert result.exit_code == 0, result.output
    assert _row(result.output, "trtforge_doubles.jiggle.default")[1] == "unsupported"
    assert _row(result.output, "aten.convolution.default")[1] == "converted"
    assert "2 engine partition(s)" in result.output  # before and after the custom op
    # in graph order: conv → bn → relu, then (after jiggle) the head up to softmax
    assert _row(result.output, "fused_1")[1:] == ["3", "convolution … relu", "engine"]
    assert _row(result.output, "fused_0")[1:] == ["5", "sym_size_int_1 … _softmax", "engine"]
    assert result.output.index("fused_1") < result.output.index("fused_0")
    assert "in PyTorch: unsupported: trtforge_doubles.jiggle.default ×1\n" in result.output


@pytest.mark.slow
def test_a_block_below_min_block_size_falls_back_to_pytorch_as_compile_decides():
    """--min-block-size 4: the 3-op block before the custom op runs in PyTorch; the head is one engine. The
    partitioned compile code (``partition(build=False)``) makes the same split."""
    import torch
    from custom_op_model import conv_jiggle_head

    from trtforge.convert.partition import partition

    result = runner.invoke(app, ["coverage", "custom_op_model:conv_jiggle_head", "--input-shape", "1x3x8x8",
                                 "--batch", "1:2:4", "--min-block-size", "4"])
    assert result.exit_code == 0, result.output
    assert "1 engine partition(s)" in result.output
    assert _row(result.output, "fused_1")[1:] == ["3", "convolution … relu", "PyTorch (3 < 4)"]
    assert _row(result.output, "fused_0")[3] == "engine"
    assert "blocks below --min-block-size 4: fused_1 (3 compute ops)" in result.output
    _module, report = partition(conv_jiggle_head(), (torch.randn(2, 3, 8, 8),), batch=(1, 2, 4), min_block_size=4,
                                build=False)
    assert set(report.engines) == {"fused_0"} and "fused_1" in report.pytorch


@pytest.mark.slow
def test_torch_executed_op_is_reported_as_forced_and_leaves_its_block():
    result = runner.invoke(app, ["coverage", "custom_op_model:conv_jiggle_head", "--input-shape", "1x3x8x8",
                                 "--batch", "1:2:4", "--min-block-size", "2", "--torch-executed-op", "aten._softmax",
                                 "--torch-executed-op", "aten.relu.default"])
    assert result.exit_code == 0, result.output
    assert _row(result.output, "aten._softmax.default")[1:] == ["torch-executed", "1"]
    assert _row(result.output, "aten.relu.default")[1:] == ["torch-executed", "1"]
    assert _row(result.output, "trtforge_doubles.jiggle.default")[1] == "unsupported"  # not forced: no converter
    assert "forced by --torch-executed-op: aten._softmax.default ×1, aten.relu.default ×1" in result.output
    blocks = [line for line in result.output.splitlines() if "fused_" in line]
    assert all("softmax" not in line and "relu" not in line for line in blocks), result.output
    assert _row(result.output, "fused_1")[1:] == ["2", "convolution … getitem", "engine"]


def test_without_partition_options_coverage_says_compile_would_refuse():
    result = runner.invoke(app, ["coverage", "custom_op_model:conv_jiggle_head", "--input-shape", "1x3x8x8"])
    assert result.exit_code == 0, result.output
    assert "partitioning at --min-block-size 3" in result.output
    assert "converts the whole module and refuses it" in " ".join(result.output.split())


@pytest.mark.parametrize(("flags", "line"), [
    (["--min-block-size", "0"], "--min-block-size 0: give a positive integer"),
    (["--torch-executed-op", "softmax"], "--torch-executed-op softmax: name an op as the exported graph does"),
    (["--torch-executed-op", "aten.relu", "--torch-executed-op", "torch.ops.aten.relu"],
     "--torch-executed-op torch.ops.aten.relu: name an op"),
])
def test_bad_partition_flags_are_one_line_before_the_model_is_imported(flags, line):
    """Refused by the config, before the factory is imported (a factory that does not exist is not reached)."""
    result = runner.invoke(app, ["coverage", "no_such_module:make", "--input-shape", "1x3x8x8", *flags])
    assert result.exit_code == 2 and line in result.output, result.output
    assert "Traceback" not in result.output and "no_such_module" not in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_coverage_shows_a_refusal_with_its_reason():
    result = runner.invoke(app, ["coverage", "custom_op_model:nearest_grid_sample", "--input-shape", "2x3x5x5"])
    assert result.exit_code == 0, result.output
    refused = [line for line in result.output.splitlines() if "refused" in line and "grid_sampler_2d" in line]
    assert refused and "bilinear" in refused[0]


def test_coverage_of_an_onnx_file_is_one_line(tmp_path):
    result = runner.invoke(app, ["coverage", str(tmp_path / "m.onnx"), "--input-shape", "1x3"])
    assert result.exit_code == 2 and "not a file" in result.output and "Traceback" not in result.output
