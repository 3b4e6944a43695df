"""The FP16/BF16 pass, checked numerically in ONNX Runtime against the FP32 graph."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
import torch
from onnx import TensorProto, helper

from trtforge.capture.export import export_onnx
from trtforge.core.ort_session import session
from trtforge.passes.evaluate import float_errors
from trtforge.passes.float16 import QdqGraphError, convert_float, plan_float
from trtforge.passes.graph import dtype_summary, load_ir, save_model


def run(path: Path, feeds: dict) -> np.ndarray:
    return session(path).run(None, feeds)[0]


def batched(path: Path, name: str, x: np.ndarray, batch: int = 32) -> np.ndarray:
    sess = session(path)
    return np.concatenate([sess.run(None, {name: x[i : i + batch]})[0] for i in range(0, len(x), batch)])


@pytest.fixture(scope="module")
def lite0_fp16(lite0_onnx, tmp_path_factory) -> Path:
    model = convert_float(load_ir(lite0_onnx), "float16")
    path = tmp_path_factory.mktemp("fp16") / "lite0_fp16.onnx"
    save_model(model, path)
    return path


def test_fp16_keeps_fp32_graph_io(lite0_fp16):
    model = onnx.load(str(lite0_fp16))
    onnx.checker.check_model(model)
    assert [i.type.tensor_type.elem_type for i in model.graph.input] == [TensorProto.FLOAT]
    assert [o.type.tensor_type.elem_type for o in model.graph.output] == [TensorProto.FLOAT]
    assert [o.name for o in model.graph.output] == ["logits"]
    summary = dtype_summary(load_ir(lite0_fp16))
    assert summary["float16"] > 80, summary  # the convolutions really run in FP16


@pytest.mark.slow
def test_fp16_efficientnet_numerics_on_real_photos(lite0_onnx, lite0_fp16, photo_inputs):
    ref = batched(lite0_onnx, "images", photo_inputs)
    out = batched(lite0_fp16, "images", photo_inputs)
    rel_l2 = np.linalg.norm(out - ref) / np.linalg.norm(ref)
    agreement = (out.argmax(1) == ref.argmax(1)).mean()
    assert rel_l2 <= 1e-2, rel_l2
    assert agreement >= 0.99, agreement


@pytest.mark.slow
def test_fp16_minilm_cosine(minilm, minilm_onnx, sentences, tmp_path):
    model, tokenize = minilm
    path = tmp_path / "minilm_fp16.onnx"
    save_model(convert_float(load_ir(minilm_onnx), "float16"), path)
    feeds = {k: v.numpy() for k, v in tokenize(sentences, seq_len=32).items()}
    ref = run(minilm_onnx, feeds)
    with torch.no_grad():
        eager = model(**tokenize(sentences, seq_len=32)).numpy()
    np.testing.assert_allclose(ref, eager, atol=1e-4)  # the exported graph is the model
    out = run(path, feeds)
    cosine = (ref * out).sum(1) / np.linalg.norm(ref, axis=1) / np.linalg.norm(out, axis=1)
    assert cosine.mean() >= 0.999, cosine.mean()
    plan = plan_float(load_ir(minilm_onnx))
    kept = set(plan.fp32_nodes.values())
    assert any("LayerNormalization" in r for r in kept)
    assert any("FP16 max" in r for r in kept)  # the -3.4e38 attention-mask constant stays FP32


class HandWrittenNorm(torch.nn.Module):
    """LayerNorm written out (ReduceMean, Pow, Sqrt) with a large-magnitude input."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(64, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.proj(x) * 300.0
        mean = h.mean(-1, keepdim=True)
        var = ((h - mean) ** 2).mean(-1, keepdim=True)
        return (h - mean) / torch.sqrt(var + 1e-12)


@pytest.mark.slow
def test_handwritten_normalisation_stays_fp32(tmp_path):
    torch.manual_seed(0)
    model = HandWrittenNorm().eval()
    x = torch.randn(4, 16, 64)
    raw = export_onnx(model, (x,), tmp_path / "norm.onnx", input_names=["x"])
    ir_model = load_ir(raw)
    plan = plan_float(ir_model)
    kept_ops = {n.op_type for n in ir_model.graph if n.name in plan.fp32_nodes}
    assert {"ReduceMean", "Sqrt"} <= kept_ops, plan.fp32_nodes
    save_model(convert_float(ir_model), tmp_path / "norm_fp16.onnx")
    out = run(tmp_path / "norm_fp16.onnx", {"x": x.numpy()})
    strict = float_errors(load_ir(raw), load_ir(tmp_path / "norm_fp16.onnx"), {"x": x.numpy()})["strict"]
    assert strict < 1e-2, strict  # each node in its declared type too, not only ORT's FP32 kernels
    with torch.no_grad():
        ref = model(x).numpy()
    # Without FP32 islands the squared values (~1e7) overflow FP16 and the output is NaN/inf.
    assert np.isfinite(out).all()
    assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < 1e-2


def test_out_of_range_constant_keeps_node_fp32():
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "big"], ["y"], name="mul_big"),
         helper.make_node("Relu", ["y"], ["z"], name="relu")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2])],
        [helper.make_tensor("big", TensorProto.FLOAT, [1], [1e6])],
    )
    model = load_ir(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]))
    plan = plan_float(model)
    assert "mul_big" in plan.fp32_nodes and "relu" not in plan.fp32_nodes
    convert_float(model)
    proto = ir.serde.serialize_model(model)
    sess = session(proto.SerializeToString())
    out = sess.run(None, {"x": np.array([1e-3, -1.0], np.float32)})[0]
    np.testing.assert_allclose(out, [1000.0, 0.0], rtol=1e-3)


def test_qdq_graph_refused():
    graph = helper.make_graph(
        [helper.make_node("QuantizeLinear", ["x", "s"], ["q"]), helper.make_node("DequantizeLinear", ["q", "s"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        [helper.make_tensor("s", TensorProto.FLOAT, [], [0.1])],
    )
    model = load_ir(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]))
    with pytest.raises(QdqGraphError, match="already contains QuantizeLinear"):
        convert_float(model)


def test_bf16_graph_is_valid_and_typed(lite0_onnx, tmp_path):
    model = convert_float(load_ir(lite0_onnx), "bfloat16")
    path = tmp_path / "lite0_bf16.onnx"
    save_model(model, path)
    proto = onnx.load(str(path))
    onnx.checker.check_model(proto, full_check=True)
    assert proto.graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT
    assert dtype_summary(load_ir(path))["bfloat16"] > 80
