"""Issue 20: what a new user met on models nobody here wrote (odd ONNX graphs, modules, read-only caches).
Each test failed before its fix: a traceback, a silent change of names or modes, or a missing warning.

The CLI commands run in the test process (``run_cli_in_process``): what these tests check is what a command
prints and writes, not the process around it."""

from __future__ import annotations

import logging
import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnx
import onnx.numpy_helper
import pytest
import torch
from cli_in_process import Done
from harness import can_mount_tmpfs, error_lines, run_cli_in_process, small_tmpfs
from onnx import TensorProto, helper
from tiny_model import EXAMPLE_SHAPE, TinyNet

import trtforge
from trtforge.core.config import CompileConfig, ConfigError
from trtforge.core.errors import NotAFolder
from trtforge.core.sidecar import read_sidecar

needs_trt = pytest.mark.needs_trt


def save_graph(path: Path, nodes, inputs, outputs, initializers=()) -> Path:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def value(name: str, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


ODD_GRAPHS = {
    "scalar_output": lambda p: save_graph(p, [helper.make_node("ReduceSum", ["x"], ["y"], keepdims=0, name="sum")],
                                          [value("x", [1, 4])], [value("y", [])]),
    "rank0_input": lambda p: save_graph(p, [helper.make_node("Relu", ["x"], ["y"], name="relu")],
                                        [value("x", [])], [value("y", [])]),
    "no_input": lambda p: save_graph(p, [helper.make_node("Constant", [], ["c"], name="c", value=helper.make_tensor(
        "v", TensorProto.FLOAT, [1, 4], [1, -2, 3, -4])), helper.make_node("Relu", ["c"], ["y"], name="relu")],
        [], [value("y", [1, 4])]),
}


def no_traceback(proc: Done) -> str:
    text = proc.stdout + proc.stderr
    assert "Traceback" not in text and "bug in trtforge" not in text, text
    return text


@pytest.mark.slow
@needs_trt
@pytest.mark.parametrize("kind", sorted(ODD_GRAPHS))
def test_check_on_the_onnxruntime_route_runs_unbatched_models(tmp_path, kind):
    model = ODD_GRAPHS[kind](tmp_path / f"{kind}.onnx")
    cache = tmp_path / "cache"
    built = run_cli_in_process(["build", model, "-o", tmp_path / "out", "-q", "--precision", "fp32"],
                               cache_dir=cache)
    assert built.returncode == 0, built.stderr
    checked = run_cli_in_process(["check", tmp_path / "out" / f"{kind}_fp32.json", "--route", "onnxruntime"],
                                 cache_dir=cache)
    no_traceback(checked)  # before: ValueError / IndexError / StopIteration and "bug in trtforge"
    assert checked.returncode == 0 and "PASS" in checked.stdout, checked.stdout + checked.stderr
    if kind == "no_input":  # export triton: one line (Triton answers requests that carry inputs)
        for backend in ("tensorrt", "python"):
            export = run_cli_in_process(["export", "triton", tmp_path / "out" / f"{kind}_fp32.json",
                                         "--repo", tmp_path / "repo", "--backend", backend], cache_dir=cache)
            no_traceback(export)
            assert export.returncode == 2 and error_lines(export.stderr) == [
                error_lines(export.stderr)[0]] and "takes no inputs" in export.stderr
            assert not (tmp_path / "repo").exists()


@pytest.mark.slow
def test_compile_leaves_the_modules_training_flags_as_they_were(tmp_path):
    torch.manual_seed(0)
    model = TinyNet().train()
    model.head.eval()  # a mix: every submodule gets its own flag back
    trtforge.compile(model, (torch.zeros(*EXAMPLE_SHAPE),), output_dir=tmp_path, cache=False, progress=False,
                     precision="fp32")
    assert model.training and model.conv.training and not model.head.training  # before: all in eval mode


@pytest.mark.slow
def test_a_batch_of_examples_builds_a_profile_that_admits_it(tmp_path):
    torch.manual_seed(0)
    model = TinyNet().eval()
    art = trtforge.compile(model, (torch.randn(2, 3, 16, 16),), output_dir=tmp_path, cache=False, progress=False)
    (profile,) = art.sidecar.profiles
    assert profile["x"]["min"][0] == 1 and profile["x"]["opt"][0] == 2 and profile["x"]["max"][0] == 2
    with trtforge.load(art.sidecar_path, route="onnxruntime") as engine:
        for rows in (1, 2):  # before: batch 1 only, and the example itself was refused
            x = torch.randn(rows, 3, 16, 16)
            np.testing.assert_allclose(engine(x)["output"].numpy(), model(x).detach().numpy(), rtol=1e-2, atol=1e-3)


def test_an_input_that_requires_grad_runs(hardening_inputs, tmp_path):
    art = Path(shutil.copytree(hardening_inputs["art"], tmp_path / "art"))
    x = torch.randn(1, 3, 16, 16, requires_grad=True)
    with trtforge.load(art / "tiny_fp16.json", route="onnxruntime") as engine:
        assert engine(x)["y"].shape == (1, 4)  # before: "Can't call numpy() on Tensor that requires grad"


@needs_trt
def test_public_names_are_kept(tmp_path, caplog):
    model = save_graph(tmp_path / "io.onnx", [helper.make_node("Relu", ["x"], ["y"], name="relu")],
                       [value("x", ["b", 4])], [value("x", ["b", 4]), value("y", ["b", 4]), value("y", ["b", 4])])
    with caplog.at_level(logging.WARNING, logger="trtforge"):
        art = trtforge.compile(model, output_dir=tmp_path / "out", cache=False, progress=False)
    assert [s.name for s in art.sidecar.inputs] == ["x"]  # before: x_orig, and engine(x=...) failed
    assert [s.name for s in art.sidecar.outputs] == ["x_output", "y"]  # before: x, y, y_alias_2
    assert sum("returned as it is" in r.message or "listed 2 times" in r.message for r in caplog.records) == 2
    x = np.array([[1.0, -2.0, 3.0, -4.0]], np.float32)
    with trtforge.load(art.sidecar_path, route="onnxruntime") as engine:
        out = engine(x=x)
    np.testing.assert_array_equal(out["x_output"].numpy(), x)
    np.testing.assert_array_equal(out["y"].numpy(), np.maximum(x, 0))


@pytest.mark.slow
@needs_trt
def test_an_int8_build_that_quantizes_nothing_says_so(tmp_path):
    weight = onnx.numpy_helper.from_array(np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32), "w")
    model = save_graph(tmp_path / "relu.onnx", [helper.make_node("MatMul", ["x", "w"], ["y"], name="head")],
                       [value("x", ["b", 8])], [value("y", ["b", 4])], [weight])  # a final head: kept in FP16
    np.save(tmp_path / "calib.npy", np.random.default_rng(0).standard_normal((16, 8)).astype(np.float32))
    proc = run_cli_in_process(["build", model, "-o", tmp_path / "out", "-q", "--precision", "int8",
                               "--allow-unaccelerated", "--calib", tmp_path / "calib.npy"], cache_dir=tmp_path / "cache")
    assert proc.returncode == 0, proc.stderr
    warnings = [line for line in error_lines(proc.stderr) if line.startswith("warning:")]
    assert len(warnings) == 1 and "no layer was quantized" in warnings[0] and "relu_fp16" in warnings[0], proc.stderr
    assert (tmp_path / "out" / "relu_fp16.json").is_file()


@pytest.mark.slow
@needs_trt
def test_options_a_build_ignores_say_so(hardening_inputs, tmp_path):
    model = shutil.copy(hardening_inputs["tiny"], tmp_path / "tiny.onnx")
    for extra, said in ((["--placement", "auto"], "--placement auto: quantization option(s) that this fp16 build ignores"),
                        (["--timing-cache", str(tmp_path / "t.cache")], "--timing-cache is ignored")):
        proc = run_cli_in_process(["build", model, "-o", tmp_path / "out", "-q", *extra], cache_dir=tmp_path / "cache")
        assert proc.returncode == 0, proc.stderr
        assert [line for line in error_lines(proc.stderr) if said in line], proc.stderr


@needs_trt
def test_overwrite_warns_about_the_sibling_artifact_it_breaks(hardening_inputs, tmp_path, caplog):
    out = Path(shutil.copytree(hardening_inputs["art"], tmp_path / "out"))  # tiny_fp16 of seed 0
    other = shutil.copy(hardening_inputs["tiny_seed1"], tmp_path / "tiny.onnx")
    with caplog.at_level(logging.WARNING, logger="trtforge"):
        trtforge.compile(other, precision="bf16", output_dir=out, overwrite=True, cache=False, progress=False)
    lines = [r.message for r in caplog.records if "tiny_reference_fp32.onnx" in r.message]
    assert len(lines) == 1 and "tiny_fp16.json" in lines[0] and "overwrite=True" in lines[0], caplog.text


@pytest.mark.slow
@needs_trt
def test_no_cache_writes_no_calibration_cache(hardening_inputs, tmp_path):
    model = shutil.copy(hardening_inputs["tiny"], tmp_path / "tiny.onnx")
    proc = run_cli_in_process(["build", model, "-o", tmp_path / "out", "-q", "--precision", "int8",
                               "--allow-unaccelerated", "--calib", hardening_inputs["calib"], "--no-cache"],
                              cache_dir=tmp_path / "cache")
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir() if p.is_dir()) == []  # before: calib_cache/


@pytest.mark.slow
@needs_trt
@pytest.mark.parametrize("populated", [False, True])
def test_a_read_only_cache_degrades_to_no_cache_with_one_warning(hardening_inputs, tmp_path, populated):
    if not can_mount_tmpfs(tmp_path):
        pytest.skip("no tmpfs can be mounted here (needs root)")
    model = shutil.copy(hardening_inputs["tiny"], tmp_path / "tiny.onnx")
    with small_tmpfs(tmp_path / "ro", "8m") as disk:
        cache = disk / "cache"
        if populated:
            shutil.copytree(hardening_inputs["cache"], cache)
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        proc = run_cli_in_process(["build", model, "-o", tmp_path / "out", "-q", "--batch", "1:2:7"], cache_dir=cache)
    lines = error_lines(proc.stderr)
    assert proc.returncode == 0, proc.stderr  # before: refused, or a bare [Errno 30] for a populated one
    assert len(lines) == 1 and lines[0].startswith("warning: the engine cache") and "Read-only" in lines[0], lines
    assert read_sidecar(tmp_path / "out" / "tiny_fp16.json").verify_engine().is_file()


@pytest.mark.slow
@needs_trt
def test_fix_lines_name_cli_flags_to_cli_users_and_arguments_to_python_users(hardening_inputs, tmp_path):
    model = shutil.copy(hardening_inputs["tiny"], tmp_path / "tiny.onnx")
    with pytest.raises(ConfigError, match=r"put the folder in output_dir=DIR$"):
        CompileConfig(name="a/b")
    proc = run_cli_in_process(["build", model, "--name", "a/b"], cache_dir=tmp_path / "cache")
    assert proc.returncode == 2 and error_lines(proc.stderr)[0].endswith("put the folder in --output-dir DIR")
    bad = tmp_path / "cachefile"
    bad.write_text("x")
    with pytest.raises(NotAFolder, match=r"\(cache_dir=DIR\)"):
        trtforge.compile(model, output_dir=tmp_path / "o", cache_dir=bad, progress=False)
    proc = run_cli_in_process(["build", model, "-o", tmp_path / "o", "--cache-dir", bad], cache_dir=tmp_path / "cache")
    assert proc.returncode == 2 and "(--cache-dir DIR)" in proc.stderr and "cache_dir=" not in proc.stderr
