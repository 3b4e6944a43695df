"""Q/DQ graphs of the real EfficientNet-Lite0 and MiniLM: structure, report, and TensorRT-RTX builds."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from trtforge.core import trt
from trtforge.core.config import QuantConfig
from trtforge.quantize.coverage import int8_coverage, mac_counts
from trtforge.quantize.quantizer import quantize_model


def rtx_build(path, batch: int = 2) -> bytes:
    """Parse and build a strongly typed engine; the plan bytes (fails the test on any error)."""
    mod = trt.bindings()
    logger = mod.Logger(mod.Logger.ERROR)
    builder = mod.Builder(logger)
    network = builder.create_network(trt.network_flags())
    parser = mod.OnnxParser(network, logger)
    ok = parser.parse_from_file(str(path))
    assert ok, [str(parser.get_error(i)) for i in range(parser.num_errors)]
    config = builder.create_builder_config()
    profile = builder.create_optimization_profile()
    for i in range(network.num_inputs):
        tensor = network.get_input(i)
        shape = [batch if d < 0 else d for d in tensor.shape]
        profile.set_shape(tensor.name, shape, shape, shape)
    config.add_optimization_profile(profile)
    plan = builder.build_serialized_network(network, config)
    assert plan is not None
    return bytes(plan)


def _qdq_facts(model: onnx.ModelProto) -> dict:
    inits = {t.name: t for t in model.graph.initializer}
    q_scales = {inits[n.input[1]].data_type for n in model.graph.node if n.op_type == "QuantizeLinear"}
    int8_weights = [t for t in model.graph.initializer if t.data_type == onnx.TensorProto.INT8 and t.name.endswith("_int8")]
    return {
        "q": sum(n.op_type == "QuantizeLinear" for n in model.graph.node),
        "dq": sum(n.op_type == "DequantizeLinear" for n in model.graph.node),
        "scale_types": q_scales,
        "int8_weights": len(int8_weights),
        "io": {vi.type.tensor_type.elem_type for vi in [*model.graph.input, *model.graph.output]},
    }


@pytest.mark.slow
def test_lite0_qdq_builds_with_rtx(lite0_onnx, photo_inputs, tmp_path):
    proto = onnx.load(str(lite0_onnx))
    # 20 photos: 16 calibrate, 4 held back (40 cost twice the calibration and bias correction; same checks).
    result = quantize_model(proto, photo_inputs[:20], QuantConfig(), progress=False)
    trt_facts, sim_facts = _qdq_facts(result.model), _qdq_facts(result.sim_model)
    assert trt_facts["q"] > 20 and trt_facts["int8_weights"] == len(result.plan.layers)
    assert trt_facts["scale_types"] == {onnx.TensorProto.FLOAT16}  # FP16 scales for TensorRT
    assert sim_facts["scale_types"] == {onnx.TensorProto.FLOAT}  # FP32 scales for ONNX Runtime
    assert trt_facts["io"] == sim_facts["io"] == {onnx.TensorProto.FLOAT}  # graph I/O stays FP32
    # Unquantized layers run in FP16 in the TensorRT graph.
    inits = {t.name: t.data_type for t in result.model.graph.initializer}
    assert onnx.TensorProto.FLOAT16 in inits.values()
    # Coverage counted independently from the graph agrees with the plan's own count.
    macs = mac_counts(proto, {"images": photo_inputs[:1]})
    assert int8_coverage(result.sim_model, macs) == pytest.approx(result.report["coverage"], abs=1e-9)
    assert 0.4 < result.report["coverage"] < 1.0
    rep = result.report
    assert rep["samples"] == {"calibration": 16, "held_back": 4}
    assert rep["task"] == "classification" and {"top1_agreement", "top5_overlap", "cosine_mean"} <= set(rep["measured"])
    assert rep["measured"]["cosine_mean"] > 0.95
    json.dumps(rep)  # JSON-able for the sidecar
    # The TensorRT graph (FP16 layers, FP16 scales) computes what the FP32-scale simulation measured:
    # run both in ONNX Runtime (with its FP16-scale optimiser disabled) on the held-back images.
    from trtforge.core.ort_session import session

    held = photo_inputs[16:20]
    trt_graph = session(result.model.SerializeToString()).run(None, {"images": held})[0]
    sim = session(result.sim_model.SerializeToString()).run(None, {"images": held})[0]
    cos = np.sum(trt_graph * sim, axis=1) / (np.linalg.norm(trt_graph, axis=1) * np.linalg.norm(sim, axis=1))
    assert cos.min() > 0.99
    path = tmp_path / "lite0_int8_qdq.onnx"
    onnx.save(result.model, str(path))
    assert len(rtx_build(path)) > 1_000_000


@pytest.mark.slow
def test_minilm_qdq_builds_with_rtx(minilm_onnx, minilm, tmp_path):
    from trtforge.zoo.texts import sentences

    _, tokenize = minilm
    proto = onnx.load(str(minilm_onnx))
    # 24 sentences: 19 calibrate, 5 held back (40: 32 and 8, 3.6 CPU s against 3.0 to quantize; same checks).
    feeds = [{k: v.numpy() for k, v in tokenize(sentences(8, offset=i), seq_len=32).items()} for i in range(0, 24, 8)]
    result = quantize_model(proto, feeds, QuantConfig(), progress=False)
    facts = _qdq_facts(result.model)
    assert facts["scale_types"] == {onnx.TensorProto.FLOAT16} and facts["int8_weights"] >= 30
    # Attention matmuls (QKᵀ, ·V) are quantized on both inputs.
    assert sum(1 for layer in result.plan.layers if not any(q.is_weight for q in layer.inputs)) == 12
    assert result.report["coverage"] > 0.8
    assert result.report["measured"]["cosine_mean"] > 0.9
    path = tmp_path / "minilm_int8_qdq.onnx"
    onnx.save(result.model, str(path))
    assert len(rtx_build(path)) > 1_000_000
