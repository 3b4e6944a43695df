"""``check`` names non-finite outputs as such (issue 35, item 6), not as a metric that missed ("top1_agreement 0").

The graph is Swin V2's normalisation in small: y = x / Reshape(Clip(|x|, 1e-12)). Its FP16 build keeps the Clip
and the Div in FP32 and the Reshape in FP16, which flushes 1e-12 to 0: y is 0/0 = NaN where x is exactly 0. The
build's example inputs (standard normal) hold no zero, so the build's non-finite guard keeps nothing; the inputs
checked here hold zeros, and check must say where the NaNs are.
"""

from __future__ import annotations

import numpy as np
import onnx
from cli_in_process import run
from onnx import TensorProto, helper

from trtforge.measure.inputs import save_npz


def _normalize_onnx(path):
    inits = [helper.make_tensor("eps", TensorProto.FLOAT, [], [1e-12]),
             helper.make_tensor("shape", TensorProto.INT64, [2], [-1, 8])]
    nodes = [helper.make_node("Abs", ["x"], ["a"], name="abs"), helper.make_node("Clip", ["a", "eps"], ["c"], name="clip"),
             helper.make_node("Reshape", ["c", "shape"], ["r"], name="reshape"),
             helper.make_node("Div", ["x", "r"], ["y"], name="div")]
    graph = helper.make_graph(nodes, "normalize", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])], initializer=inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_check_names_the_nan_outputs_and_their_samples(tmp_path):
    built = run(["build", _normalize_onnx(tmp_path / "normalize.onnx"), "--precision", "fp16", "-o", tmp_path, "-q"])
    assert built.returncode == 0, built.stderr
    x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    x[1, :3] = 0.0
    x[3, 5] = 0.0
    save_npz(tmp_path / "inputs.npz", {"x": x})
    done = run(["check", tmp_path / "normalize_fp16.json", "--route", "onnxruntime", "--inputs", tmp_path / "inputs.npz",
                "--repeats", "1"])
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAIL: output 'y' has 4 NaN/inf value(s) in 2 sample(s); FP32 has none" in done.stdout
    assert "rel_l2 nan" not in done.stdout


def test_check_and_compare_show_progress_per_stage(tmp_path):
    """A progress bar per stage on stderr (the reference's batches, the route's; each side of compare), drawn once
    the work has run a moment: here at once (delay 0), on a console that is a terminal."""
    import io

    from rich.console import Console

    from trtforge.builder.progress import StepProgress
    from trtforge.debug.check import check_artifact
    from trtforge.debug.compare import compare_sides

    built = run(["build", _normalize_onnx(tmp_path / "normalize.onnx"), "--precision", "fp16", "-o", tmp_path, "-q"])
    assert built.returncode == 0, built.stderr
    artifact = tmp_path / "normalize_fp16.json"
    screen = io.StringIO()
    with StepProgress("check normalize", console=Console(file=screen, force_terminal=True, width=120), delay=0) as steps:
        report = check_artifact(artifact, route="onnxruntime", samples=8, repeats=1, progress=steps)
    assert report.passed and report.samples == 8
    shown = screen.getvalue()
    assert "check normalize: FP32 reference" in shown and "check normalize: route onnxruntime" in shown
    assert "8/8" in shown  # 8 samples, the profile's batch of 1: counted per batch
    screen = io.StringIO()
    with StepProgress("compare", console=Console(file=screen, force_terminal=True, width=120), delay=0) as steps:
        compare_sides(str(tmp_path / "normalize.onnx"), f"{artifact}@onnxruntime", samples=4, progress=steps)
    assert "compare: A runs" in screen.getvalue() and "compare: B runs" in screen.getvalue()
    quiet = run(["check", artifact, "--route", "onnxruntime", "--samples", "4", "--repeats", "1"])
    assert quiet.returncode == 0 and "FP32 reference" not in quiet.stderr  # a check within a moment prints no bar
