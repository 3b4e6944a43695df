"""``compare --layerwise`` streams (issue 20): memory bounded by ``--max-memory``, 0-d tensors, static batches.

A 640×640 detector once grew to 23 GB RSS because every intermediate tensor became a graph output at
once; here a chain of 24 large activations (8 MiB each per batch, 768 MiB for both graphs at once)
must stay within a few hundred MB of the process's own size with ``--max-memory 32M``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from trtforge.debug.layerwise import chunks, layerwise

ROOT = Path(__file__).resolve().parents[2]


def _chain(path: Path, depth: int, bump_at: int | None = None, shape=(None, 8, 256, 512)) -> Path:
    """x → (Add c_i → Relu) × depth; ``bump_at`` adds 0.5 more at that link (the candidate's divergence)."""
    nodes, inits, prev = [], [], "x"
    for i in range(depth):
        value = 0.5 if i == bump_at else 0.0
        inits.append(numpy_helper.from_array(np.array(value - 0.01, np.float32), f"c{i}"))
        nodes += [helper.make_node("Add", [prev, f"c{i}"], [f"a{i}"], name=f"add{i}"),
                  helper.make_node("Relu", [f"a{i}"], [f"r{i}"], name=f"relu{i}")]
        prev = f"r{i}"
    nodes.append(helper.make_node("Identity", [prev], ["y"], name="out"))
    dims = ["batch" if d is None else d for d in shape]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


#: Runs the CLI and prints its own peak RSS (VmHWM, kB) at exit. The child's ``ru_maxrss`` would not do: it
#: starts from the parent's size at fork, and a pytest process that has run the suite holds well over 1 GB.
PEAK = ("import atexit, runpy, sys\n"
        "def peak():\n"
        "    with open('/proc/self/status') as status:\n"
        "        print('peak-kB', next(l.split()[1] for l in status if l.startswith('VmHWM')), file=sys.stderr)\n"
        "atexit.register(peak)\n"
        "sys.argv[0] = 'trtforge'\n"
        "runpy.run_module('trtforge.cli', run_name='__main__')\n")


def _peak_rss_mib(argv: list[str]) -> tuple[int, str, float]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="200")
    proc = subprocess.run([sys.executable, "-c", PEAK, *argv], capture_output=True, text=True, env=env, check=False)
    peak = next(float(line.split()[1]) for line in proc.stderr.splitlines() if line.startswith("peak-kB"))
    return proc.returncode, proc.stdout + proc.stderr, peak / 1024


def test_chunks_stay_within_the_budget():
    assert chunks(["a", "b", "c", "d"], {"a": 4, "b": 4, "c": 9, "d": 1}, 8) == [["a", "b"], ["c"], ["d"]]


@pytest.mark.slow
def test_layerwise_peak_memory_is_bounded(tmp_path):
    reference = _chain(tmp_path / "ref.onnx", 24)
    candidate = _chain(tmp_path / "cand.onnx", 24, bump_at=18)
    code, out, peak = _peak_rss_mib(["compare", "--layerwise", str(reference), str(candidate), "--samples", "2",
                                     "--max-memory", "32M"])
    assert code == 1, out  # the bump diverges
    assert "first layer past the threshold" in out and "a18" in out, out
    # both graphs' 48 shared tensors at once: 48 x 8 MiB x 2 graphs = 768 MiB over the process's ~200 MiB (measured:
    # 966 MiB with --max-memory 64G); streamed: chunks within the 32 MiB budget (measured: 246 MiB)
    assert peak < 600, f"peak RSS {peak:.0f} MiB with --max-memory 32M"


def test_layerwise_zero_dim_and_static_batch(tmp_path):
    """A 0-d tensor (a Shape/Gather scalar, as in PP-OCR's recognizer) and a static batch of 1 with 3 samples."""
    ref = _chain(tmp_path / "ref.onnx", 3, shape=(1, 2, 4, 4))
    model = onnx.load(ref)
    model.graph.node.extend([
        helper.make_node("ReduceMax", ["r2"], ["m"], keepdims=0, name="max"),  # a 0-d float tensor
        helper.make_node("Mul", ["r2", "m"], ["scaled"], name="scale")])
    model.graph.output.append(helper.make_tensor_value_info("scaled", TensorProto.FLOAT, [1, 2, 4, 4]))
    onnx.save(model, ref)
    inputs = {"x": np.random.default_rng(0).standard_normal((3, 2, 4, 4)).astype(np.float32)}
    report = layerwise(ref, ref, inputs, max_memory=1 << 20)
    assert report.first is None and report.layers and all(layer.rel_l2 == 0.0 for layer in report.layers)
    assert any("not compared" in note for note in report.notes)  # the 0-d tensor
