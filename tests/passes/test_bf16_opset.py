"""Issue 20: BF16 needs opset 22, and an older graph is converted there, not relabelled. Relabelling an
opset-12 graph left its ``Squeeze(axes=...)`` attribute unread at opset 22 (there ``axes`` is an input), so
the Squeeze squeezed every size-1 dim: TensorRT-RTX refused PP-OCRv4's recognizer ("ISqueezeLayer without
an axes input requires dimension 1 to not be 1 at runtime"), and shape inference read another graph."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import trtforge
from trtforge.passes.evaluate import run_ort, run_strict
from trtforge.passes.graph import load_ir
from trtforge.passes.process import process, reference_graph


def opset12_squeeze(path):
    """x [b, 1, 4] → Squeeze(axes=[1]) (an attribute before opset 13) → ReduceMean(axes=[1]) → y [b]."""
    nodes = [helper.make_node("Squeeze", ["x"], ["s"], name="squeeze", axes=[1]),
             helper.make_node("ReduceMean", ["s"], ["y"], name="mean", axes=[1], keepdims=0)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b"])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)]), path)
    return path


def test_bf16_graph_keeps_every_node_meaning(tmp_path):
    reference = reference_graph(load_ir(opset12_squeeze(tmp_path / "m.onnx")))
    bf16 = process(reference, "bf16").model
    assert bf16.opset_imports[""] == 22
    squeeze = next(n for n in bf16.graph if n.op_type == "Squeeze")
    assert len(squeeze.inputs) == 2 and "axes" not in squeeze.attributes  # axes moved to the input
    x = np.random.default_rng(0).standard_normal((1, 1, 4)).astype(np.float32)  # batch 1: a second size-1 dim
    expected = run_ort(reference, {"x": x})[0]
    got = run_strict(bf16, {"x": x})[0]
    assert got.shape == expected.shape == (1,)  # before: the relabelled Squeeze dropped the batch dim too
    np.testing.assert_allclose(got.astype(np.float32), expected, rtol=2e-2, atol=2e-2)
    assert reference.opset_imports[""] == 12  # the FP32 reference is left as it is


@pytest.mark.needs_trt
def test_bf16_builds_where_fp16_does(tmp_path):
    model = opset12_squeeze(tmp_path / "m.onnx")
    for precision in ("fp16", "bf16"):  # before: the bf16 build failed in TensorRT-RTX's parser
        art = trtforge.compile(model, precision=precision, output_dir=tmp_path / "out", cache=False, progress=False)
        assert art.sidecar.outputs[0].shape == (1,)  # batch 1: the default profile


@pytest.mark.slow
@pytest.mark.needs_trt
def test_ppocr_recognizer_builds_in_bf16(tmp_path):
    rapidocr = pytest.importorskip("rapidocr_onnxruntime")
    from pathlib import Path

    rec = Path(rapidocr.__file__).parent / "models" / "ch_PP-OCRv4_rec_infer.onnx"
    shapes = {"x": ((1, 3, 48, 320), (1, 3, 48, 320), (2, 3, 48, 320))}
    art = trtforge.compile(rec, precision="bf16", shapes=shapes, output_dir=tmp_path, cache=False, progress=False)
    assert art.sidecar.precision.built == "bf16" and art.engine_path.stat().st_size > 0
