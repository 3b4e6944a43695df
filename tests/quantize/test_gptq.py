"""GPTQ for weight-only INT4 (issue 21's int4-wo accuracy): on a fixed seed it lowers a MatMul's output error
against round-to-nearest (numpy and ONNX Runtime agree on the graph it writes), MiniLM's INT4 graph runs in
ONNX Runtime close to FP32, and TensorRT-RTX builds it with the method in the sidecar's report."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from onnx import numpy_helper

from trtforge.core import trt
from trtforge.core.config import ConfigError, QuantConfig, check_quant_options
from trtforge.core.ort_session import session
from trtforge.quantize.methods.gptq import gptq_weight
from trtforge.quantize.quantizer import quantize_model


def _correlated(rng: np.random.Generator, n: int) -> np.ndarray:
    """(n, 4, 256) inputs whose channels are correlated (a random mixing of 64 sources), as real activations are."""
    mix = np.random.default_rng(7).standard_normal((64, 256)).astype(np.float32)
    return (rng.standard_normal((n, 4, 64)).astype(np.float32) @ mix).astype(np.float32)


@pytest.fixture(scope="module")
def linear(tmp_path_factory):
    torch.manual_seed(1)
    lin = torch.nn.Linear(256, 64).eval()
    path = tmp_path_factory.mktemp("gptq") / "linear.onnx"
    torch.onnx.export(lin, (torch.randn(1, 4, 256),), str(path), input_names=["x"], output_names=["y"], dynamo=False,
                      opset_version=19, dynamic_axes={"x": {0: "b"}, "y": {0: "b"}})
    w, b = lin.weight.detach().numpy().astype(np.float64), lin.bias.detach().numpy().astype(np.float64)
    return onnx.load(str(path)), w, b


def _dequantized(model: onnx.ModelProto) -> np.ndarray:
    """The weight the graph's DequantizeLinear gives back, in numpy: INT4 values × their block scales."""
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    dq = next(n for n in model.graph.node if n.op_type == "DequantizeLinear")
    values, scales = inits[dq.input[0]].astype(np.float64), inits[dq.input[1]].astype(np.float64)
    axis = next(a.i for a in dq.attribute if a.name == "axis")
    block = next(a.i for a in dq.attribute if a.name == "block_size")
    assert inits[dq.input[0]].dtype == np.dtype("int4") or str(inits[dq.input[0]].dtype) == "int4"
    assert np.abs(values).max() <= 7
    return values * np.repeat(scales, block, axis=axis)


def test_gptq_lowers_a_matmul_output_error_against_round_to_nearest(linear):
    proto, w, b = linear
    calib, held = _correlated(np.random.default_rng(0), 48), _correlated(np.random.default_rng(1), 32)
    reference = held.astype(np.float64) @ w.T + b
    errors = {}
    for rounding in ("nearest", "gptq"):
        config = QuantConfig(bias_correction=False, block_size=32, rounding=rounding)
        result = quantize_model(proto, calib, config, progress=False, precision="int4-wo")
        sim = result.sim_model
        got = session(sim.SerializeToString()).run(["y"], {"x": held})[0].astype(np.float64)
        np.testing.assert_allclose(got, held.astype(np.float64) @ _dequantized(sim) + b, rtol=1e-4, atol=1e-3)
        errors[rounding] = float(np.mean((got - reference) ** 2))
    assert result.report["gptq"]["applied"] and result.report["gptq"]["layers"] == 1
    assert [m["method"] for m in result.report["methods"]] == ["gptq"]
    assert errors["gptq"] < 0.7 * errors["nearest"], errors


def test_gptq_with_uncorrelated_inputs_is_round_to_nearest():
    """With XᵀX = I no column's error can be made up by another: GPTQ rounds every weight to nearest."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((16, 64))
    q, scales = gptq_weight(w, np.eye(64), block=16, qmax=7.0)
    s = np.repeat(scales, 16, axis=1)
    assert scales.shape == (16, 4) and np.array_equal(scales, scales.astype(np.float16).astype(np.float64))
    np.testing.assert_array_equal(q, np.clip(np.round(w / s), -7, 7))
    correlated = rng.standard_normal((200, 8)) @ rng.standard_normal((8, 64))
    q2, _ = gptq_weight(w, correlated.T @ correlated, block=16, qmax=7.0)
    assert np.abs(q2).max() <= 7 and (q2 != np.clip(np.round(w / s), -7, 7)).any()


def test_gptq_is_refused_for_precisions_with_quantized_activations():
    for precision in ("int8", "fp8"):
        with pytest.raises(ConfigError, match=rf"rounding='gptq' \(--rounding gptq\) is for int8-wo/int4-wo, not {precision}: drop it"):
            check_quant_options(QuantConfig(rounding="gptq"), precision)
    check_quant_options(QuantConfig(rounding="gptq"), "int4-wo")
    check_quant_options(QuantConfig(rounding="gptq"), "int8-wo")


@pytest.mark.slow
def test_minilm_int4_graph_runs_in_onnxruntime_close_to_fp32(minilm, minilm_onnx):
    """Real MiniLM-L6 weights (the run's shared export, 32 tokens), INT4 blocks of 32 with GPTQ: the FP16 Q/DQ graph
    handed to TensorRT runs in ONNX Runtime on 40 held-out sentences with cosine >= 0.98 against FP32
    (round-to-nearest: about 0.96)."""
    from trtforge.zoo.texts import sentences

    _, tokenize = minilm
    fp32 = onnx.load(str(minilm_onnx))

    def feeds(texts):
        return {k: v.numpy() for k, v in tokenize(texts, seq_len=32).items()}

    calib = [{k: v[i:i + 1] for k, v in feeds(sentences(48)).items()} for i in range(48)]
    result = quantize_model(fp32, calib, QuantConfig(rounding="gptq", block_size=32), progress=False,
                            precision="int4-wo")
    info = result.report["gptq"]
    assert info["applied"] and info["layers"] == 36 and info["rel_l2_after"] < 0.75 * info["rel_l2_before"], info
    assert len(result.plan.layers) == 36 and not result.plan.excluded  # every MatMul weight quantized
    held = feeds(sentences(40, offset=48))
    names = [i.name for i in fp32.graph.input]
    ref = session(fp32.SerializeToString()).run(None, {k: held[k] for k in names})[0].reshape(40, -1)
    got = session(result.model.SerializeToString()).run(None, {k: held[k] for k in names})[0].reshape(40, -1)
    cos = np.sum(ref * got, 1) / (np.linalg.norm(ref, axis=1) * np.linalg.norm(got, axis=1))
    assert cos.mean() >= 0.98, cos.mean()


@pytest.mark.skipif(not trt.info().is_rtx, reason="TensorRT-RTX builds")
@pytest.mark.parametrize("block", [16, 32])  # 16: the docs' recommendation for int4-wo with GPTQ
def test_tensorrt_rtx_builds_the_gptq_int4_graph_and_the_sidecar_reports_it(linear, tmp_path, block):
    import trtforge

    proto, _, _ = linear
    path = tmp_path / "linear.onnx"
    onnx.save(proto, str(path))
    art = trtforge.compile(path, precision="int4-wo", targets=["sm86", "sm89", "sm120"],
                           calibration_data=_correlated(np.random.default_rng(0), 48), output_dir=tmp_path / "out",
                           progress=False, cache=False, quant=QuantConfig(rounding="gptq", block_size=block))
    assert art.sidecar.precision.built == "int4-wo" and art.engine_path.stat().st_size > 0
    quant = art.sidecar.quantization
    assert quant.rounding == "gptq" and quant.block_size == block
    assert quant.gptq["applied"] and quant.gptq["rel_l2_after"] < quant.gptq["rel_l2_before"]
    assert quant.methods[0]["method"] == "gptq" and quant.methods[0]["seconds"] > 0
