"""Issue 20's findings on the debugging path, each on a real TensorRT-RTX build of a static-batch model.

- ``check --route onnxruntime`` of a BF16 build ran ONNX Runtime on a graph it has no BF16 Conv for
  (a traceback); now it runs the graph's BF16 emulation (issue 35), and the report says so;
- ``compare a_fp16.json@onnxruntime a_bf16.json@onnxruntime`` ran the FP32 reference on both sides (a
  PASS of a graph against itself); now each side runs its processed graph and names it, and one
  graph against itself is refused;
- ``--samples 8`` on a static-batch model ran one sample; now eight;
- ``debug precision`` on a static-batch model fed batches of 8 (ONNX Runtime: "invalid dimensions");
  now it runs, prints progress, stops at ``--max-seconds`` in one line, and its reproduce line builds;
- the README's ``art.sidecar.precision["built"]`` raised TypeError.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _cli(*argv, cache: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), TRTFORGE_CACHE_DIR=str(cache), COLUMNS="250")
    return subprocess.run([sys.executable, "-m", "trtforge.cli", *map(str, argv)], capture_output=True, text=True,
                          env=env, timeout=600, check=False)


def _static_convnet(path: Path) -> Path:
    """A static batch-1 Conv → Relu → Conv → Relu → GlobalAveragePool → Flatten → Gemm classifier."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) * scale, name)
             for name, shape, scale in (("w1", (8, 3, 3, 3), 0.3), ("w2", (8, 8, 3, 3), 0.2), ("fc", (10, 8), 0.5))]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
             helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
             helper.make_node("GlobalAveragePool", ["r2"], ["p"], name="pool"),
             helper.make_node("Flatten", ["p"], ["f"], name="flat"),
             helper.make_node("Gemm", ["f", "fc"], ["logits"], transB=1, name="head")]
    graph = helper.make_graph(nodes, "convnet", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The model's FP16 and BF16 artifacts (real builds) and calibration-style data for debug precision."""
    tmp = tmp_path_factory.mktemp("issue20")
    model = _static_convnet(tmp / "convnet.onnx")
    out = tmp / "out"
    for precision in ("fp16", "bf16"):
        proc = _cli("build", model, "--precision", precision, "-o", out, "-q", cache=tmp / "cache")
        assert proc.returncode == 0, proc.stderr
    np.savez(tmp / "data.npz", x=np.random.default_rng(1).standard_normal((24, 3, 16, 16)).astype(np.float32))
    return {"tmp": tmp, "model": model, "out": out, "data": tmp / "data.npz", "cache": tmp / "cache"}


def test_check_bf16_runs_the_bf16_emulation(built):
    proc = _cli("check", built["out"] / "convnet_bf16.json", "--route", "onnxruntime", "--samples", "4",
                "--repeats", "1", cache=built["cache"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "BF16 emulated: FP32 compute, BF16 storage" in " ".join(proc.stdout.split()) and "PASS" in proc.stdout


def test_check_honours_samples_on_a_static_batch(built):
    from trtforge.debug.check import check_artifact

    report = check_artifact(built["out"] / "convnet_fp16.json", route="onnxruntime", samples=8, repeats=1)
    assert (report.samples, report.batch) == (8, 1)


def test_compare_runs_each_artifacts_processed_graph_and_names_it(built):
    out = built["out"]
    proc = _cli("compare", f"{out / 'convnet_fp16.json'}@onnxruntime", f"{out / 'convnet_bf16.json'}@onnxruntime",
                "--samples", "4", cache=built["cache"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"A runs {out / 'convnet_fp16.onnx'}" in proc.stdout
    assert f"B runs {out / 'convnet_bf16.onnx'} (BF16 emulated: FP32 compute, BF16 storage)" in proc.stdout
    rel_l2 = float(next(line for line in proc.stdout.splitlines() if "logits" in line).split("│")[2])
    assert rel_l2 > 0.0  # two different graphs: an FP16 and a BF16 one


def test_compare_refuses_a_graph_against_itself(built):
    artifact = f"{built['out'] / 'convnet_fp16.json'}@onnxruntime"
    proc = _cli("compare", artifact, artifact, cache=built["cache"])
    assert proc.returncode == 2 and "both sides run the same graph" in proc.stderr, proc.stdout + proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_debug_precision_static_batch_progress_and_reproduce(built):
    out = built["out"]
    proc = _cli("debug", "precision", out / "convnet_fp16.json", "--precision", "fp16", "--metric", "rel_l2",
                "--target", "1e-5", "--data", built["data"], "--samples", "8", "--held-out", "8", cache=built["cache"])
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    assert "graph 1:" in proc.stdout  # progress, one line per graph evaluated
    line = next(x for x in proc.stdout.splitlines() if x.startswith("reproduce: "))
    argv = shlex.split(line.removeprefix("reproduce: "))
    assert argv[:3] == ["trtforge", "build", str(built["model"])] and "--keep-fp32" in argv
    again = _cli(*argv[1:], "-q", cache=built["cache"])
    assert again.returncode == 0, again.stderr
    from trtforge.core.sidecar import read_sidecar

    sidecar = read_sidecar(out / "convnet_bisected_fp16.json")
    kept = [argv[i + 1] for i, a in enumerate(argv) if a == "--keep-fp32"]
    assert kept and all(p.strip("^$") in sidecar.precision.fp32_nodes for p in kept)


def test_debug_precision_stops_at_max_seconds_in_one_line(built):
    proc = _cli("debug", "precision", built["out"] / "convnet_fp16.json", "--precision", "fp16", "--metric", "rel_l2",
                "--target", "1e-9", "--data", built["data"], "--samples", "8", "--held-out", "8",
                "--max-seconds", "0.001", cache=built["cache"])
    assert proc.returncode == 1 and "--max-seconds 0.001 reached" in proc.stderr, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_readme_sidecar_precision_by_key(built):
    from trtforge.core.sidecar import read_sidecar

    sidecar = read_sidecar(built["out"] / "convnet_fp16.json")
    assert sidecar.precision["built"] == "fp16" == sidecar.precision.built
    with pytest.raises(KeyError, match="no key 'bulit'"):
        sidecar.precision["bulit"]
