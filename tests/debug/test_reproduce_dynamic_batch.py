"""``debug precision``'s reproduce line for an artifact built with ``--dynamic-batch`` from a static-batch ONNX
file: the line crashed on the recorded ``--batch`` ('1:2:4' as recorded), and left ``--dynamic-batch`` out (the
build record did not hold it), so it could not rebuild the same profile (issue 35, follow-up)."""

from __future__ import annotations

import json
import shlex

import numpy as np
import onnx
import pytest
from cli_in_process import run
from debug_models import rounding_model


@pytest.mark.needs_trt
def test_reproduce_line_of_a_dynamic_batch_build_rebuilds_its_profile(tmp_path):
    model = onnx.load(rounding_model(tmp_path / "r.onnx"))
    for value in (*model.graph.input, *model.graph.output):
        value.type.tensor_type.shape.dim[0].dim_value = 1  # a static batch of 1, as many exported files are
    onnx.save(model, tmp_path / "r.onnx")
    np.save(tmp_path / "x.npy", np.random.default_rng(0).uniform(0.8, 1.2, (16, 8)).astype(np.float32))
    built = run(["build", "r.onnx", "--precision", "fp16", "--dynamic-batch", "--batch", "1:2:4", "--opt-level", "0",
                 "-o", "out", "-q"], cwd=tmp_path)
    assert built.returncode == 0, built.stderr
    found = run(["debug", "precision", "out/r_fp16.json", "--precision", "fp16", "--metric", "rel_l2", "--target",
                 "0.01", "--data", "x.npy", "--samples", "8", "--held-out", "8"], cwd=tmp_path)
    assert found.returncode == 0, found.stdout + found.stderr
    line = next(x for x in found.stdout.splitlines() if x.startswith("reproduce: "))
    argv = shlex.split(line.removeprefix("reproduce: "))
    assert "--dynamic-batch" in argv and argv[argv.index("--batch") + 1] == "1:2:4"
    again = run([*argv[1:], "-q"], cwd=tmp_path)  # as printed
    assert again.returncode == 0, again.stdout + again.stderr
    first, second = (json.loads((tmp_path / "out" / f"{name}.json").read_text()) for name in ("r_fp16", "r_bisected_fp16"))
    assert second["profiles"] == first["profiles"] and first["profiles"][0]["x"]["max"] == [4, 8]
