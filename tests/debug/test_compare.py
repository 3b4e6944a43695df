"""``trtforge compare``: two models on the same inputs, and layer-wise divergence on real graphs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx_ir as ir
import pytest
from debug_models import double_artifact, outlier_net, reduce_onnx
from typer.testing import CliRunner

from trtforge.cli import app
from trtforge.debug.compare import compare_sides
from trtforge.debug.layerwise import layerwise
from trtforge.passes.graph import layer_label, load_ir, save_model
from trtforge.passes.process import process

runner = CliRunner()
BROKEN_CONV = 10  # the 11th Conv of EfficientNet-Lite0: block 3's depthwise conv


@pytest.fixture(scope="module")
def broken_lite0(lite0_onnx, tmp_path_factory) -> tuple[Path, str]:
    """Lite0 with one conv weight perturbed (its first filter ×4); the path and that conv's label."""
    model = load_ir(lite0_onnx)
    conv = [n for n in model.graph if n.op_type == "Conv"][BROKEN_CONV]
    weight = conv.inputs[1]
    array = weight.const_value.numpy().copy()
    array[0] *= 4.0
    weight.const_value = ir.tensor(array, name=weight.name)
    path = tmp_path_factory.mktemp("broken") / "broken.onnx"
    save_model(model, path)
    return path, layer_label(conv)


@pytest.mark.slow
def test_layerwise_names_the_perturbed_layer(lite0_onnx, broken_lite0, tmp_path):
    broken, label = broken_lite0
    plot = tmp_path / "divergence.png"
    result = runner.invoke(app, ["compare", "--layerwise", str(lite0_onnx), str(broken), "--samples", "4",
                                 "--plot", str(plot)])
    assert result.exit_code == 1, result.output
    assert f"first layer past the threshold: {label} (Conv" in result.output
    assert plot.read_bytes()[:4] == b"\x89PNG"
    report = layerwise(lite0_onnx, broken, samples=2)
    before = [row for row in report.layers if row.index < report.first.index]
    assert before and all(row.rel_l2 == 0.0 for row in before)  # identical up to the broken layer
    assert report.first.label == label and report.first.rel_l2 > 0.05
    assert report.most_added(1)[0].label == label  # the layer that adds the error itself


@pytest.mark.slow
def test_layerwise_fp16_graph_stays_within_its_tolerance(lite0_onnx):
    fp16 = process(load_ir(lite0_onnx), "fp16").model
    report = layerwise(lite0_onnx, fp16, samples=2)
    assert report.precision == "fp16" and report.first is None
    assert len(report.layers) > 60  # the processed graph keeps the reference's tensor names
    assert 0 < report.layers[-1].rel_l2 < report.threshold


@pytest.mark.slow
def test_compare_module_with_artifact_and_saved_outputs_elsewhere(lite0_sidecar, tmp_path):
    inputs, outputs = tmp_path / "in.npz", tmp_path / "out.npz"
    first = runner.invoke(app, ["compare", "trtforge.zoo:efficientnet_lite0", f"{lite0_sidecar}@onnxruntime",
                                "--samples", "4", "--save-inputs", str(inputs), "--save-outputs", str(outputs)])
    assert first.exit_code == 0, first.output
    assert "PASS: top1_agreement" in first.output and "classification" in first.output
    with np.load(inputs) as x, np.load(outputs) as y:
        assert x["images"].shape == (4, 3, 224, 224) and y["logits"].shape == (4, 1000)
    # "Elsewhere": the saved reference outputs against another route, on the saved inputs.
    again = runner.invoke(app, ["compare", str(outputs), f"{lite0_sidecar}@eager", "--inputs", str(inputs)])
    assert again.exit_code == 0, again.output
    assert "(4 samples;" in " ".join(again.output.split())  # the table's title wraps at the table's width


def test_compare_through_the_tensorrt_double_and_a_failing_pair(fake_trt, tmp_path):
    artifact = double_artifact(tmp_path / "a")
    reference = tmp_path / "a" / "fake_reference_fp32.onnx"
    result = compare_sides(str(reference), f"{artifact}@tensorrt", device="cpu", samples=6, bindings=fake_trt.bindings)
    assert result.judgement.passed and result.judgement.outputs[0].rel_l2 < 1e-6
    wrong = reduce_onnx(tmp_path / "max.onnx", "ReduceMax")
    failed = runner.invoke(app, ["compare", str(reference), str(wrong), "--samples", "4"])
    assert failed.exit_code == 1 and "FAIL: logits: rel_l2" in failed.output


def test_bad_sides_are_one_line(tmp_path):
    result = runner.invoke(app, ["compare", "nothing.txt", "other.txt"])
    assert result.exit_code == 2 and "give a module factory 'package.module:function'" in result.output
    layer = runner.invoke(app, ["compare", "--layerwise", "a.onnx", "b.json"])
    assert layer.exit_code == 2 and "is not an .onnx file" in layer.output


def test_layerwise_on_trtforge_int8_qdq_graph_names_the_outlier_layer(tmp_path):
    from trtforge.core.config import QuantConfig
    from trtforge.passes.graph import dtype_summary
    from trtforge.quantize.quantizer import quantize_model

    reference = outlier_net(tmp_path / "outlier.onnx")
    rng = np.random.default_rng(5)
    calib = {"x": rng.normal(0, 1, (40, 4, 8, 8)).astype(np.float32)}
    result = quantize_model(load_ir(reference), calib, QuantConfig(include=(".*",), bias_correction=False),
                            progress=False)
    int8 = tmp_path / "outlier_int8.onnx"
    save_model(result.model, int8)  # what trtforge hands TensorRT: FP16 graph, Q/DQ with FP16 scales
    assert "float16" in dtype_summary(load_ir(int8))
    report = layerwise(reference, int8, samples=8)
    assert report.precision == "int8" and any("FP32 scales" in note for note in report.notes)
    assert report.first is not None and report.first.tensor == "c2" and report.first.label == "w2"
    conv1 = next(row for row in report.layers if row.tensor == "c1")
    assert conv1.rel_l2 < report.threshold  # the layer before it quantizes well
    assert report.most_added(1)[0].tensor == "c2"
