"""`trtforge demo` (what `make demo` runs): real Lite0 builds, the table, and a rerun over an older demo's files."""

from __future__ import annotations

import io

import onnx
import pytest
from rich.console import Console

from trtforge.cli.demo import run_demo


@pytest.mark.slow  # two real EfficientNet-Lite0 builds
def test_demo_builds_checks_and_reruns_over_a_previous_versions_output(tmp_path):
    out = tmp_path / "trtforge_out"
    rows = run_demo(out, crops=8, console=Console(file=io.StringIO()))
    assert [r.precision for r in rows] == ["fp32", "fp16"]
    fp32, fp16 = rows
    assert fp32.top1_agreement == 1.0 and fp32.rel_l2 == 0.0
    assert fp16.top1_agreement >= 0.875 and 0 < fp16.rel_l2 < 2e-2  # FP16 graph against FP32 in ONNX Runtime
    assert fp16.engine.is_file() and fp16.engine_mb < fp32.engine_mb

    # An earlier trtforge wrote another graph under the same name (e.g. before an export change):
    # a user's build would be refused there without --overwrite; the demo replaces its own output.
    reference = out / "efficientnet_lite0_reference_fp32.onnx"
    old = onnx.load(reference)
    old.doc_string = "written by an older trtforge"
    onnx.save(old, reference)
    again = run_demo(out, crops=8, console=Console(file=io.StringIO()))
    assert [r.top1_agreement for r in again] == [r.top1_agreement for r in rows]
    assert onnx.load(reference).doc_string != "written by an older trtforge"
