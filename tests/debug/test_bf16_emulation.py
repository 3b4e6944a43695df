"""BF16 graphs on the CPU (issue 35, item 5): ONNX Runtime has no BF16 Conv or MatMul there, so ``check``,
``compare`` and ``compare --layerwise`` run the emulation graph (``trtforge.core.bf16_emulation``: FP32 compute,
every value stored in BF16 rounded to BF16). Before it, ``compare --layerwise`` of a BF16 graph was a traceback
("Could not find an implementation for Conv(22)") on every model, and ``check`` went through ``onnx.reference``
(past 10 minutes on a 640² detector).

Real references: PP-OCRv4's detector (the ``rapidocr_onnxruntime`` wheel's file) and a transformers ViT from a
tiny config, each built at BF16 by TensorRT-RTX through the run's engine store (the matrix builds the same ones).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from cli_in_process import run

DET_SHAPES = "x:1x3x64x64:1x3x64x64:1x3x64x64"


def _ppocr_det() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("rapidocr_onnxruntime")
    assert spec is not None and spec.origin is not None, "make setup installs rapidocr_onnxruntime (zoo extra)"
    return Path(spec.origin).parent / "models" / "ch_PP-OCRv4_det_infer.onnx"


def _vit_onnx(path: Path) -> Path:
    """The matrix's tiny ViT (32² images, patches of 8, 2 layers of width 32), random weights, TorchScript export."""
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2,
                                    num_attention_heads=2, intermediate_size=64)

    class Vit(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = transformers.ViTModel(config)

        def forward(self, pixels):
            return self.model(pixels)["last_hidden_state"]

    torch.onnx.export(Vit().eval(), (torch.randn(1, 3, 32, 32),), str(path), opset_version=17, dynamo=False)
    return path


def _build(source: Path, out: Path, name: str, *flags: str) -> Path:
    done = run(["build", source, "--precision", "bf16", "-o", out, "--name", name, "-q", *flags])
    assert done.returncode == 0, done.stdout + done.stderr
    return out


@pytest.fixture(scope="module")
def det(tmp_path_factory) -> Path:
    """PP-OCRv4 det at 1x3x64x64, BF16 (the matrix's build: the same flags, one engine in the store)."""
    return _build(_ppocr_det(), tmp_path_factory.mktemp("det_bf16"), "ppocr_det", "--shapes", DET_SHAPES)


def _rel_l2(actual: np.ndarray, expected: np.ndarray) -> float:
    return float(np.linalg.norm(actual - expected) / np.linalg.norm(expected))


def _with_output(model: onnx.ModelProto, name: str, elem_type: int) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    copy.graph.output.append(onnx.helper.make_tensor_value_info(name, elem_type, None))
    return copy


def test_emulation_matches_the_strict_evaluator_on_ppocr_det(det):
    """The detector's logits (the Sigmoid's input; its probabilities are ~0 on a photo without text): the
    emulation stays within BF16 rounding of ``onnx.reference`` computing each node in BF16, much closer to it
    than the FP32 reference is, so it computes the BF16 graph and not the FP32 one."""
    from onnx.reference import ReferenceEvaluator
    from skimage import data, transform

    from trtforge.core.bf16_emulation import emulate_bf16
    from trtforge.core.ort_session import session

    graph = onnx.load(det / "ppocr_det_bf16.onnx")
    logits = next(node.input[0] for node in graph.graph.node if node.op_type == "Sigmoid")
    photo = transform.resize(data.astronaut(), (64, 64)).astype(np.float32)
    feeds = {"x": ((photo - 0.5) / 0.5).transpose(2, 0, 1)[None].astype(np.float32)}
    strict = ReferenceEvaluator(_with_output(graph, logits, 16)).run(None, feeds)[-1].astype(np.float32)
    emulated = session(emulate_bf16(_with_output(graph, logits, 16)).SerializeToString()).run(None, feeds)[-1]
    fp32 = session(_with_output(onnx.load(det / "ppocr_det_reference_fp32.onnx"), logits, 1).SerializeToString()).run(
        None, feeds)[-1]
    assert emulated.dtype == np.float32 and emulated.shape == fp32.shape
    assert _rel_l2(emulated, strict) < 0.01
    assert _rel_l2(emulated, strict) < 0.5 * _rel_l2(fp32, strict)


def _layerwise_cli(reference: Path, candidate: Path) -> str:
    done = run(["compare", "--layerwise", reference, candidate, "--samples", "2"])
    assert done.returncode in (0, 1) and "Traceback" not in done.stderr, done.stdout + done.stderr
    assert "BF16 emulated: FP32 compute, BF16 storage" in done.stdout, done.stdout
    return done.stdout


def test_layerwise_of_bf16_names_layers_on_ppocr_det(det):
    from trtforge.debug.layerwise import layerwise

    out = _layerwise_cli(det / "ppocr_det_reference_fp32.onnx", det / "ppocr_det_bf16.onnx")
    assert "bf16 candidate" in out and "Conv" in out
    report = layerwise(det / "ppocr_det_reference_fp32.onnx", det / "ppocr_det_bf16.onnx", samples=2)
    convs = [layer for layer in report.layers if layer.op_type == "Conv"]
    assert report.precision == "bf16" and len(convs) > 50
    # BF16 storage shows in every layer (the FP32 graph would read 0), and stays within BF16 rounding early on
    assert all(layer.rel_l2 > 1e-4 for layer in convs) and convs[0].rel_l2 < 1e-2


def test_layerwise_of_bf16_names_layers_on_a_transformers_vit(tmp_path):
    out = _build(_vit_onnx(tmp_path / "vit.onnx"), tmp_path / "out", "vit")
    text = _layerwise_cli(out / "vit_reference_fp32.onnx", out / "vit_bf16.onnx")
    assert "bf16 candidate" in text and "MatMul" in text


def test_check_and_compare_run_the_emulation(det):
    from trtforge.core.bf16_emulation import EMULATED
    from trtforge.debug.check import check_artifact

    report = check_artifact(det / "ppocr_det_bf16.json", route="onnxruntime", samples=2, repeats=1)
    assert report.evaluator == EMULATED
    # random inputs: probabilities near 0, where BF16 logits move the relative error (not this test's subject);
    # the probabilities themselves agree with FP32's to well within BF16 rounding
    (probabilities,) = report.judgement.outputs
    assert 0.0 < probabilities.max_abs < 1e-4
    done = run(["compare", f"{det / 'ppocr_det_reference_fp32.onnx'}", f"{det / 'ppocr_det_bf16.json'}@onnxruntime",
                "--samples", "2"])
    assert done.returncode in (0, 1) and "error" not in done.stderr.lower(), done.stdout + done.stderr  # judged
    assert f"B runs {det / 'ppocr_det_bf16.onnx'} ({EMULATED})" in done.stdout


def test_a_bf16_input_and_output_graph_runs_emulated(tmp_path):
    """A graph written in BF16 end to end (input, weights, output): the ONNX Runtime route feeds FP32, rounds it
    to BF16 as the graph would store it, and returns what ``onnx.reference`` computes in BF16, within rounding."""
    import ml_dtypes
    from onnx import TensorProto, helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    from trtforge.core.bf16_emulation import EMULATED
    from trtforge.runtime.onnxruntime_route import OnnxRuntimeEngine

    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(ml_dtypes.bfloat16), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])],
        "bf16", [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [1, 4, 8, 8])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
    onnx.save(model, tmp_path / "m.onnx")
    x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    strict = ReferenceEvaluator(model).run(None, {"x": x.astype(ml_dtypes.bfloat16)})[0].astype(np.float32)
    with OnnxRuntimeEngine(tmp_path / "m.onnx") as engine:
        assert engine.evaluator == EMULATED and engine.inputs[0].dtype == "float32"
        emulated = engine(x)["y"].numpy()
    assert _rel_l2(emulated, strict) < 1e-2
    # the output is stored in BF16: every value is one BF16 holds
    assert np.array_equal(emulated, emulated.astype(ml_dtypes.bfloat16).astype(np.float32))
