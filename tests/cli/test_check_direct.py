"""Issue 35, item 10: a direct-path artifact (PyTorch → TensorRT, no ONNX) is checked from the CLI with the
model's factory: ``check ART.json --route eager --model package.module:function``; the FP32 reference is that
PyTorch model. Without ``--model`` the refusal names the flag (it named ``route='eager' with model=``)."""

from __future__ import annotations

import pytest
from cli_in_process import run

pytestmark = pytest.mark.needs_trt


def test_check_a_direct_path_artifact_with_its_factory(tmp_path):
    built = run(["build", "tiny_model:TinyNet", "--path", "direct", "--input-shape", "2x3x16x16", "--opt-level", "0",
                 "-o", tmp_path / "out", "--name", "tiny_direct", "-q"])
    assert built.returncode == 0, built.stderr
    artifact = tmp_path / "out" / "tiny_direct_fp16.json"
    checked = run(["check", artifact, "--route", "eager", "--model", "tiny_model:TinyNet", "--samples", "4",
                   "--repeats", "1"])
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "vs PyTorch FP32" in checked.stdout and "PASS" in checked.stdout
    refused = run(["check", artifact, "--route", "eager", "--samples", "4", "--repeats", "1"])
    assert refused.returncode == 2 and "--model tiny_model:TinyNet" in refused.stderr, refused.stdout + refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and "model=" not in refused.stderr
    onnxruntime = run(["check", artifact, "--route", "onnxruntime", "--model", "tiny_model:TinyNet"])
    assert onnxruntime.returncode == 2 and "choose --route eager" in onnxruntime.stderr, onnxruntime.stderr
