"""Promises that are not a refusal: a cache that cannot store warns, concurrent builds, hash checks before
loading, honest reports, and the options users expect. Each test failed before issue 15's fixes.

CLI commands run in the test process (``run_cli_in_process``), except where processes are the point: two
concurrent builds are two real processes."""

from __future__ import annotations

import json
import logging
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from harness import can_mount_tmpfs, cli_env, error_lines, fill, run_cli_in_process, small_tmpfs, snapshot

import trtforge
from trtforge.core.config import CompileConfig, ConfigError, QuantConfig, parse_layer_precision
from trtforge.core.errors import AccuracyBudgetMissed, MissingDependency
from trtforge.core.sidecar import EngineHashMismatch, read_sidecar
from trtforge.pipeline import default_name

needs_trt = pytest.mark.needs_trt


@pytest.mark.slow
@needs_trt
def test_a_full_cache_warns_and_still_delivers_the_engine(hardening_inputs, tmp_path):
    if not can_mount_tmpfs(tmp_path):
        pytest.skip("no tmpfs can be mounted here (needs root)")
    model = shutil.copy(hardening_inputs["tiny"], tmp_path / "tiny.onnx")
    with small_tmpfs(tmp_path / "disk", "2m") as disk:
        fill(disk, leave_bytes=8 * 1024)  # the entry (~20 kB compressed) does not fit
        proc = run_cli_in_process(["build", model, "-o", tmp_path / "out", "-q", "--batch", "1:2:3"],
                                  cache_dir=disk / "cache")
        lines = error_lines(proc.stderr)
        assert proc.returncode == 0, proc.stderr
        assert len(lines) == 1 and lines[0].startswith("warning: the engine cache") and "No space left" in lines[0]
        assert read_sidecar(tmp_path / "out" / "tiny_fp16.json").verify_engine().is_file()
        left = [p.name for p in (disk / "cache").rglob("*")
                if p.is_file() and (p.parent.name == "blobs" or p.suffix == ".tmp")]
        assert left == []  # no entry without its record, no temp file


@pytest.mark.slow
@needs_trt
def test_concurrent_builds_of_one_command_both_succeed(hardening_inputs, tmp_path):
    model = shutil.copy(hardening_inputs["tiny"], tmp_path / "tiny.onnx")
    argv = [sys.executable, "-m", "trtforge.cli", "build", str(model), "-o", str(tmp_path / "out"), "-q",
            "--batch", "1:2:5"]
    env = cli_env(tmp_path / "cache")
    procs = [subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    results = [(p.wait(300), p.stderr.read()) for p in procs]
    assert [rc for rc, _ in results] == [0, 0], results
    assert read_sidecar(tmp_path / "out" / "tiny_fp16.json").verify_engine()


@pytest.mark.slow
@needs_trt
def test_concurrent_builds_of_one_name_with_other_options_never_both_win(hardening_inputs, tmp_path):
    model = shutil.copy(hardening_inputs["tiny"], tmp_path / "tiny.onnx")
    env = cli_env(tmp_path / "cache")
    procs = [subprocess.Popen([sys.executable, "-m", "trtforge.cli", "build", str(model), "-o", str(tmp_path / "out"),
                               "-q", "--batch", batch], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for batch in ("1:2:6", "1:3:7")]
    results = sorted((p.wait(300), p.stderr.read()) for p in procs)
    assert [rc for rc, _ in results] == [0, 2], results
    assert "holds a different trtforge build" in results[1][1]
    sidecar = read_sidecar(tmp_path / "out" / "tiny_fp16.json")
    sidecar.verify_engine()  # the winner's engine and sidecar belong together


@needs_trt
def test_onnxruntime_route_checks_the_reference_sha256(hardening_inputs, tmp_path):
    art = Path(shutil.copytree(hardening_inputs["art"], tmp_path / "art"))
    x = np.zeros((1, 3, 16, 16), np.float32)
    with trtforge.load(art / "tiny_fp16.json", route="onnxruntime") as engine:
        assert engine(x)["y"].shape == (1, 4)
    reference = art / "tiny_reference_fp32.onnx"
    import onnx

    proto = onnx.load(str(reference))
    proto.graph.initializer[0].raw_data = bytes(len(proto.graph.initializer[0].raw_data))  # altered weights
    reference.write_bytes(proto.SerializeToString())
    with pytest.raises(EngineHashMismatch, match="tiny_reference_fp32.onnx does not match its sidecar"):
        trtforge.load(art / "tiny_fp16.json", route="onnxruntime")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
@needs_trt
def test_tensorrt_route_without_cuda_says_so(hardening_inputs):
    with pytest.raises(MissingDependency, match="CUDA GPU, and this machine has none"):
        trtforge.load(hardening_inputs["art"] / "tiny_fp16.json")


def test_cache_ls_prints_names_as_they_are_in_one_unit(tmp_path):
    entries = tmp_path / "cache" / "entries"
    entries.mkdir(parents=True)
    meta = {"generator": "trtforge-engine-cache", "model": "[red]x:thumbs_down:", "precision": "fp16",
            "targets": [], "size": 14_900_000, "created": "2026-01-01", "files": {}}
    (entries / ("a" * 64 + ".json")).write_text(json.dumps(meta))
    proc = run_cli_in_process(["cache", "ls", "--cache-dir", tmp_path / "cache"], cache_dir=tmp_path / "cache")
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())  # the title may wrap
    assert "[red]x:thumbs_down:" in text
    assert "(14.9 MB of 21474.8 MB limit)" in text and "GB" not in text


@pytest.mark.slow
@needs_trt
def test_a_cache_hit_says_so(hardening_inputs, tmp_path):
    model = shutil.copy(hardening_inputs["tiny"], tmp_path / "tiny.onnx")
    argv = ["build", model, "-o", tmp_path / "out", "-q"]
    first = run_cli_in_process(argv, cache_dir=tmp_path / "cache")
    second = run_cli_in_process(argv, cache_dir=tmp_path / "cache")
    assert first.returncode == second.returncode == 0
    assert first.stdout.startswith("built ") and " in " in first.stdout
    assert second.stdout.startswith("cache hit: wrote") and "no build ran" in second.stdout


@pytest.mark.slow
def test_help_fits_80_columns_without_cutting_option_names(tmp_path):
    for argv in (["--help"], ["build", "--help"], ["cache", "ls", "--help"], ["bench", "--help"]):
        proc = run_cli_in_process(argv, cache_dir=tmp_path)  # COLUMNS=200: a wide terminal
        assert proc.returncode == 0, proc.stderr
        assert max(len(line) for line in proc.stdout.splitlines()) <= 80, proc.stdout
        assert "…" not in proc.stdout
    build_help = run_cli_in_process(["build", "--help"], cache_dir=tmp_path)
    assert build_help.returncode == 0, build_help.stderr
    for flag in ("--hardware-compatibility", "--no-bias-correction", "--version-compatible", "--shapes",
                 "--keep-fp32", "--layer-precision", "--overwrite", "--strict-accuracy", "--holdout", "--calib-batch-size"):
        assert flag in build_help.stdout


def test_names_and_lists_users_type():
    assert default_name(Path("_best.onnx")) == "best" and default_name(Path("[x].onnx")) == "x"
    assert CompileConfig(targets=["sm86,sm80", "sm89"]).targets == ("sm80", "sm86", "sm89")
    assert CompileConfig(shapes={"x": ((1, 3, 8, 8), (1, 3, 16, 16), (1, 3, 32, 32))}).shapes_map["x"][2] == (1, 3, 32, 32)


@pytest.mark.parametrize(("shapes", "message"), [
    ({"x": ((1, 3, 32, 32), (1, 3, 16, 16), (1, 3, 8, 8))}, "min <= opt <= max"),
    ({"x": ((1, 3, 8), (1, 3, 16, 16), (1, 3, 32, 32))}, "different ranks"),
    ({"x": ((0, 3, 8, 8), (1, 3, 16, 16), (1, 3, 32, 32))}, "at least 1"),
])
def test_python_shapes_are_checked_when_the_config_is_made(shapes, message):
    with pytest.raises(ConfigError, match=message):
        CompileConfig(shapes=shapes)


def test_batch_that_shapes_would_override_is_refused():
    shapes = {"x": ((1, 3, 8, 8), (1, 3, 16, 16), (1, 3, 32, 32))}
    with pytest.raises(ConfigError, match="batch=1:8:32 and shapes\\['x'\\]"):
        CompileConfig(batch=(1, 8, 32), shapes=shapes)
    assert CompileConfig(batch=(1, 1, 1), shapes=shapes).batch[0].max == 1


@pytest.mark.slow
@needs_trt
def test_shapes_flag_builds_dynamic_spatial_dims(tmp_path):
    model = tmp_path / "spatial.onnx"
    torch.manual_seed(0)
    from tiny_model import TinyNet

    torch.onnx.export(TinyNet().eval(), (torch.zeros(1, 3, 16, 16),), str(model), dynamo=False, input_names=["x"],
                      output_names=["y"], dynamic_axes={"x": {0: "n", 2: "h", 3: "w"}}, opset_version=20)
    proc = run_cli_in_process(["build", model, "-o", tmp_path / "out", "-q", "--shapes",
                               "x:1x3x8x8:2x3x16x16:4x3x32x32"], cache_dir=tmp_path / "cache")
    assert proc.returncode == 0, proc.stderr
    profile = read_sidecar(tmp_path / "out" / "spatial_fp16.json").profiles[0]["x"]
    assert profile == {"min": [1, 3, 8, 8], "opt": [2, 3, 16, 16], "max": [4, 3, 32, 32]}


@needs_trt
def test_keep_fp32_keeps_the_named_nodes_with_the_reason(hardening_inputs, tmp_path):
    art = trtforge.compile(hardening_inputs["tiny"], output_dir=tmp_path, keep_fp32=["Conv"], progress=False,
                           cache_dir=tmp_path / "cache")
    kept = art.sidecar.precision.fp32_nodes
    assert any("Conv" in name for name in kept), kept
    assert all("keep_fp32 pattern 'Conv'" in reason for name, reason in kept.items() if "Conv" in name)
    assert art.sidecar.precision.node_dtypes  # and the graph still builds


@pytest.mark.parametrize(("value", "kwargs", "message"), [
    (["conv"], {}, r"layer_precision 'conv': write PATTERN:PRECISION .* e\.g\. layer_precision=\{'\^/head/': 'fp32'\}"),
    ({"": "fp32"}, {}, r"layer_precision \('', 'fp32'\): write PATTERN:PRECISION"),
    ({"conv": "int8"}, {}, r"'conv:int8': a layer can be given fp32, fp16, bf16, not 'int8'.*use exclude"),
    ({"conv": "fp8"}, {}, r"not 'fp8'"),
    ({"(": "fp32"}, {}, r"layer_precision pattern '\(' is not a valid regular expression"),
    ({"conv": "bf16"}, {}, r"conv:bf16 with precision fp16: a graph computes in one float type"),
    ({"conv": "fp16"}, {"precision": "fp32"}, r"conv:fp16 with precision fp32"),
    ({"conv": "fp32"}, {"precision": "int8"}, r"is for fp16/bf16 builds; .*--exclude"),
])
def test_layer_precision_is_checked_when_the_config_is_made(value, kwargs, message):
    with pytest.raises(ConfigError, match=message):
        CompileConfig(layer_precision=value, **kwargs)


def test_layer_precision_forms_python_and_cli():
    want = (("^/head/", "fp32"), ("a:b", "fp32"))
    assert CompileConfig(layer_precision={"^/head/": "FP32", "a:b": "fp32"}).layer_precision == want
    assert CompileConfig(layer_precision=["^/head/:fp32", "a:b:fp32"]).layer_precision == want
    assert parse_layer_precision(["^/head/:fp32", "a:b:fp32"]) == want
    assert CompileConfig(precision="bf16", layer_precision={"x": "bf16"}).fp32_patterns == ()
    with pytest.raises(ConfigError, match=r"--layer-precision 'x': write PATTERN:PRECISION .* --layer-precision"):
        parse_layer_precision(["x"])


@pytest.mark.slow
@needs_trt
def test_layer_precision_fp32_keeps_the_named_layer_in_fp32(hardening_inputs, tmp_path):
    """A real TensorRT-RTX build from the CLI: the processed graph computes the Conv in FP32 (ONNX Runtime
    agrees with the FP32 reference there to 1e-6) and the rest in FP16; --keep-fp32 Conv is the same request."""
    import onnx
    import onnxruntime as ort

    model = shutil.copy(hardening_inputs["tiny"], tmp_path / "tiny.onnx")
    argv = ["build", model, "-q", "--layer-precision", "/conv/Conv:fp32"]
    first = run_cli_in_process([*argv, "-o", tmp_path / "a"], cache_dir=tmp_path / "cache")
    plain = run_cli_in_process(["build", model, "-q", "-o", tmp_path / "plain"], cache_dir=tmp_path / "cache")
    assert first.returncode == plain.returncode == 0, first.stderr + plain.stderr
    sidecar = read_sidecar(tmp_path / "a" / "tiny_fp16.json")
    assert "keep_fp32 pattern '/conv/Conv'" in sidecar.precision.fp32_nodes["/conv/Conv"]
    dtypes = {}
    for out in ("a", "plain"):
        graph = onnx.load(tmp_path / out / read_sidecar(tmp_path / out / "tiny_fp16.json").source.onnx_file)
        weights = {t.name: t.data_type for t in graph.graph.initializer}
        dtypes[out] = {n.name: weights.get(n.input[1]) for n in graph.graph.node if n.op_type in ("Conv", "Gemm")}
    assert dtypes["a"] == {"/conv/Conv": onnx.TensorProto.FLOAT, "/head/Gemm": onnx.TensorProto.FLOAT16}
    assert dtypes["plain"] == {"/conv/Conv": onnx.TensorProto.FLOAT16, "/head/Gemm": onnx.TensorProto.FLOAT16}
    # The Conv's output, read from the processed graph in ONNX Runtime, is the FP32 reference's.
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    conv = {}
    for label, path in (("reference", hardening_inputs["tiny"]),
                        ("kept", tmp_path / "a" / sidecar.source.onnx_file)):
        graph = onnx.load(path)
        graph.graph.output.extend([onnx.helper.make_empty_tensor_value_info("/conv/Conv_output_0")])
        session = ort.InferenceSession(graph.SerializeToString(), providers=["CPUExecutionProvider"])
        conv[label] = session.run(["/conv/Conv_output_0"], {session.get_inputs()[0].name: x})[0]
    assert conv["kept"].dtype == np.float32
    np.testing.assert_allclose(conv["kept"], conv["reference"], rtol=1e-6, atol=1e-6)
    # --keep-fp32 PATTERN and --layer-precision PATTERN:fp32 are one request: the second is a cache hit.
    again = run_cli_in_process(["build", model, "-q", "--keep-fp32", "/conv/Conv", "-o", tmp_path / "b"],
                               cache_dir=tmp_path / "cache")
    assert again.returncode == 0 and again.stdout.startswith("cache hit"), again.stdout + again.stderr


@needs_trt
def test_missed_int8_budget_warns_and_strict_accuracy_refuses(hardening_inputs, tmp_path, caplog):
    data = np.load(hardening_inputs["calib"])
    # Both layers forced to INT8 (the rules would keep this tiny net's only conv and head in FP16), and a
    # relative L2 of 1e-9: no INT8 graph meets it.
    quant = QuantConfig(task="other", error_budget=1e-9, include=("Conv", "Gemm"))
    common = {"precision": "int8", "calibration_data": data, "quant": quant, "progress": False,
              "cache_dir": tmp_path / "cache", "allow_unaccelerated": True}
    with caplog.at_level(logging.WARNING, logger="trtforge"):
        art = trtforge.compile(hardening_inputs["tiny"], output_dir=tmp_path / "a", **common)
    assert any("misses its error budget" in r.getMessage() for r in caplog.records)
    assert art.sidecar.unknown_keys() == []  # every key of the ONNX path's INT8 report is a typed field
    with pytest.raises(AccuracyBudgetMissed, match="nothing was written"):
        trtforge.compile(hardening_inputs["tiny"], output_dir=tmp_path / "b", strict_accuracy=True, **common)
    assert not (tmp_path / "b").exists() or snapshot(tmp_path / "b") == {}


@needs_trt
def test_float64_calibration_data_is_not_taken_silently(hardening_inputs, tmp_path, caplog):
    data = np.load(hardening_inputs["calib"]).astype(np.float64)
    with caplog.at_level(logging.WARNING, logger="trtforge"):
        trtforge.compile(hardening_inputs["tiny"], precision="int8", calibration_data=data, output_dir=tmp_path,
                         progress=False, cache_dir=tmp_path / "cache", allow_unaccelerated=True)
    assert any("is float64; the model takes float32" in r.getMessage() for r in caplog.records)


@pytest.mark.slow
@needs_trt
def test_verbosity_flags(hardening_inputs, tmp_path):
    model = shutil.copy(hardening_inputs["tiny"], tmp_path / "tiny.onnx")
    argv = ["build", model, "-o", tmp_path / "out", "-q"]
    run_cli_in_process(argv, cache_dir=tmp_path / "cache")
    loud = run_cli_in_process(["-v", *argv], cache_dir=tmp_path / "cache")
    assert re.search(r"^info: cache hit: tiny", loud.stderr, re.M), loud.stderr
    quiet = run_cli_in_process(["-q", *argv], cache_dir=tmp_path / "cache")
    assert quiet.returncode == 0 and quiet.stderr == ""


@pytest.mark.slow
@needs_trt
def test_bench_without_preprocessing_and_with_a_failing_route(hardening_inputs, tmp_path):
    art = Path(shutil.copytree(hardening_inputs["art"], tmp_path / "art"))
    assert read_sidecar(art / "tiny_fp16.json").preprocessing is None
    out = tmp_path / "bench.json"
    proc = run_cli_in_process(["bench", art / "tiny_fp16.json", "--route", "onnxruntime", "--route", "tensorrt",
                               "--batch", "1", "--warmup", "1", "--repeats", "3", "--device", "cpu", "--json", out],
                              cache_dir=tmp_path / "c")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(out.read_text())["rows"]
    assert [(r["route"], r["kind"]) for r in rows] == [("onnxruntime", "model"), ("tensorrt", "failed")]
    assert "CUDA" in rows[1]["error"]
    assert "FAILED" in proc.stdout
