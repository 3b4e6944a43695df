"""Precision bisection: the fewest layers to keep in higher precision, and the build flags that reproduce it."""

from __future__ import annotations

import json
import shlex

import numpy as np
import pytest
from debug_models import outlier_net, rounding_model
from typer.testing import CliRunner

from trtforge.cli import app
from trtforge.debug.bisect import bisect_float, shortest_prefix
from trtforge.measure.inputs import split_batches
from trtforge.passes.graph import load_ir
from trtforge.passes.process import process
from trtforge.quantize.report import run_model

runner = CliRunner()


def _batches(seed: int, n: int = 64):
    rng = np.random.default_rng(seed)
    return split_batches({"x": rng.uniform(0.8, 1.2, (n, 8)).astype(np.float32)}, 16)


def test_shortest_prefix_worked_example():
    calls = []

    def holds(kept):
        calls.append(kept)
        return {"b"} <= kept

    assert shortest_prefix(["a", "b", "c", "d"], holds) == {"b"}
    assert shortest_prefix(["a", "b"], lambda kept: True) == frozenset()


def test_fp16_bisection_finds_the_rounding_node_and_the_build_keeps_it(tmp_path):
    path = rounding_model(tmp_path / "rounding.onnx")
    model = load_ir(path)
    plain = run_model(process(load_ir(path), "fp16").model, _batches(1))[0]
    np.testing.assert_allclose(plain, 0.5)  # FP16 as the float pass makes it: the x-term is gone
    result = bisect_float(model, _batches(1), _batches(2), "rel_l2", 1e-2)
    assert result.kept == ("scale",) and result.reached
    assert result.baseline > 0.1 and result.held_out_value < 1e-2
    flags = shlex.split(result.build_flags)
    assert flags == ["--precision", "fp16", "--keep-fp32", "^scale$"]
    out = tmp_path / "out"
    built = runner.invoke(app, ["build", str(path), *flags, "--batch", "1:4:16", "-o", str(out), "--quiet"])
    assert built.exit_code == 0, built.output
    sidecar = json.loads(next(out.glob("*.json")).read_text())
    assert "keep_fp32" in sidecar["precision"]["fp32_nodes"]["scale"]


def test_debug_precision_command_fp16(tmp_path):
    path = rounding_model(tmp_path / "rounding.onnx")
    data = tmp_path / "x.npy"
    np.save(data, np.random.default_rng(0).uniform(0.8, 1.2, (96, 8)).astype(np.float32))
    result = runner.invoke(app, ["debug", "precision", str(path), "--precision", "fp16", "--metric", "rel_l2",
                                 "--target", "0.01", "--data", str(data), "--samples", "32", "--held-out", "32"])
    assert result.exit_code == 0, result.output
    assert "--keep-fp32 '^scale$'" in result.output
    bad = runner.invoke(app, ["debug", "precision", str(path), "--metric", "accuracy"])
    assert bad.exit_code == 2 and "--metric accuracy" in bad.output


@pytest.mark.parametrize("value", ["[unclosed"])
def test_keep_fp32_patterns_are_checked(value):
    from trtforge.core.config import CompileConfig, ConfigError

    with pytest.raises(ConfigError, match="keep_fp32 pattern"):
        CompileConfig(keep_fp32=(value,))


def test_int8_bisection_keeps_the_layer_with_the_outlier_input_and_the_flags_reproduce_it(tmp_path):
    from trtforge.core.config import QuantConfig
    from trtforge.debug.bisect import bisect_int8
    from trtforge.passes.graph import ensure_node_names
    from trtforge.quantize import placement

    rng = np.random.default_rng(3)
    x = {"x": rng.normal(0, 1, (48, 4, 8, 8)).astype(np.float32)}
    search = split_batches({"x": rng.normal(0, 1, (32, 4, 8, 8)).astype(np.float32)}, 8)
    held = split_batches({"x": rng.normal(0, 1, (32, 4, 8, 8)).astype(np.float32)}, 8)
    model = load_ir(outlier_net(tmp_path / "outlier.onnx"))
    result = bisect_int8(model, search, held, "rel_l2", 0.05, x)
    assert result.baseline > 0.05  # every layer in INT8 misses the target
    assert result.kept == ("w2",) and result.reached  # conv2, labelled by its weight and result.held_out_value <= 0.05
    assert result.candidates == 3 and result.order in ("sensitivity", "graph")
    # The printed flags, as trtforge build parses them, place exactly that.
    flags = shlex.split(result.build_flags)
    excludes = [flags[i + 1] for i, f in enumerate(flags) if f == "--exclude"]
    includes = [flags[i + 1] for i, f in enumerate(flags) if f == "--include"]
    decisions = placement.decide(placement.analyse(ensure_node_names(load_ir(tmp_path / "outlier.onnx"))),
                                 excludes, includes)
    assert {o for o, why in decisions.items() if why} == {"c2"}
    assert QuantConfig(exclude=tuple(excludes), include=tuple(includes)).exclude == ("^w2$",)


@pytest.mark.needs_trt
def test_the_int8_reproduce_line_builds_as_printed(tmp_path):
    """Issue 35, item 9: the printed INT8 line was refused by ``build`` (the INT8 layers run unaccelerated on
    TensorRT-RTX: ``--allow-unaccelerated`` or other targets). The line, as printed, now builds."""
    from cli_in_process import run

    path = outlier_net(tmp_path / "outlier.onnx")
    data = tmp_path / "x.npy"
    np.save(data, np.random.default_rng(0).normal(0, 1, (32, 4, 8, 8)).astype(np.float32))
    found = run(["debug", "precision", path, "--precision", "int8", "--metric", "rel_l2", "--target", "0.05",
                 "--data", data, "--samples", "16", "--held-out", "16"], cwd=tmp_path)
    assert found.returncode == 0, found.stdout + found.stderr
    line = next(x for x in found.stdout.splitlines() if x.startswith("reproduce: "))
    argv = shlex.split(line.removeprefix("reproduce: "))
    assert argv[:2] == ["trtforge", "build"] and "--exclude" in argv
    built = run([*argv[1:], "--opt-level", "0", "-q"], cwd=tmp_path)  # as printed; level 0: a cheap build
    assert built.returncode == 0, built.stdout + built.stderr
