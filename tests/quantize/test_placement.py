"""Placement rules on the real EfficientNet-Lite0 and MiniLM graphs, and the overrides."""

from __future__ import annotations

import onnx
import pytest

from trtforge.quantize.placement import analyse, decide


@pytest.fixture(scope="module")
def lite0_analysis(lite0_onnx):
    return analyse(onnx.load(str(lite0_onnx)))


@pytest.fixture(scope="module")
def minilm_analysis(minilm_onnx):
    return analyse(onnx.load(str(minilm_onnx)))


def _by_label(analysis, decisions):
    return {c.label: decisions[c.output] for c in analysis.candidates}


def test_lite0_default_rules(lite0_analysis):
    a = lite0_analysis
    assert len(a.candidates) == 50 and not a.attention_blocks and not a.mlp_pairs  # 49 convs + fc
    d = _by_label(a, decide(a))
    assert "not a multiple of 32" in d["_conv_stem"]  # 3 input channels
    assert "final head" in d["_fc"]
    assert d["_blocks.15._project_conv"] is None  # 1152 input channels: INT8
    assert d["_conv_head"] is None  # 320 channels


def test_lite0_overrides(lite0_analysis):
    a = lite0_analysis
    d = _by_label(a, decide(a, exclude=(r"_blocks\.15\.",), include=("_fc", "_conv_stem")))
    assert d["_fc"] is None and d["_conv_stem"] is None
    assert "excluded by pattern" in d["_blocks.15._project_conv"]
    # An op type excludes every layer of that type; exclude wins over include.
    d = _by_label(a, decide(a, exclude=("Gemm",), include=("_fc",)))
    assert "excluded by pattern 'Gemm'" in d["_fc"]
    # rules=False (auto placement's starting point) quantizes everything not excluded.
    assert all(v is None for v in decide(a, rules=False).values())


def test_depthwise_kind_excludes_exactly_the_grouped_convs(lite0_analysis):
    a = lite0_analysis
    d = _by_label(a, decide(a, exclude=("DepthwiseConv",)))
    excluded = {label for label, reason in d.items() if reason == "excluded by pattern 'DepthwiseConv'"}
    grouped = {c.label for c in a.candidates if c.op_type == "Conv" and c.groups > 1}
    assert excluded == grouped and len(grouped) == 16  # one depthwise conv per MBConv block
    assert all(label.endswith("_depthwise_conv") for label in grouped)
    assert d["_blocks.15._project_conv"] is None  # pointwise convs keep their INT8


@pytest.mark.slow  # the MiniLM encoder's ONNX export (session fixture)
def test_minilm_structure(minilm_analysis):
    a = minilm_analysis
    labels = {c.output: c.label for c in a.candidates}
    assert len(a.attention_blocks) == 6 and all(len(b) == 6 for b in a.attention_blocks)
    first = [labels[o] for o in a.attention_blocks[0]]
    assert {"bert.encoder.layer.0.attention.self.query", "bert.encoder.layer.0.attention.self.key",
            "bert.encoder.layer.0.attention.self.value", "bert.encoder.layer.0.attention.output.dense"} <= set(first)
    assert [(labels[x], labels[y]) for x, y in a.mlp_pairs][0] == (
        "bert.encoder.layer.0.intermediate.dense", "bert.encoder.layer.0.output.dense")
    assert len(a.mlp_pairs) == 6


@pytest.mark.slow  # the MiniLM encoder's ONNX export (session fixture)
def test_minilm_attention_all_or_nothing_and_mlp_rule(minilm_analysis):
    a = minilm_analysis
    labels = {c.output: c.label for c in a.candidates}
    d = decide(a)
    # The last output projection is the head; the MLP rule then keeps its first projection in FP16.
    head = {labels[o]: r for o, r in d.items() if r}
    assert "final head" in head["bert.encoder.layer.5.output.dense"]
    assert "MLP first projection" in head["bert.encoder.layer.5.intermediate.dense"]
    assert len(head) == 2
    # Excluding one projection of an attention block moves the whole block to FP16.
    d = decide(a, exclude=(r"layer\.2\.attention\.self\.query",))
    block = a.attention_blocks[2]
    assert all(d[o] for o in block)
    assert sum(1 for o in block if "all INT8 or all FP16" in d[o]) == 5
    assert not any(d[o] for o in a.attention_blocks[1])


def test_a_batched_constant_matmul_weight_is_quantized_per_tensor(tmp_path):
    """A MatMul whose B is a constant of rank 3 (DeBERTa-v2's relative-position keys, folded by the dynamo
    exporter into a (heads, K, N) tensor): a per-channel DequantizeLinear (1-D scale on a 3-D B) crashed the INT8
    build, because ONNX Runtime fuses it into MatMulIntegerToFloat, which refuses that zero point ("b zero point
    is not valid"). Its weight is quantized per tensor; the build passes and the Q/DQ graph runs in ONNX Runtime."""
    import json

    import numpy as np
    from cli_in_process import run
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    init = [numpy_helper.from_array(rng.standard_normal((2, 16, 16)).astype(np.float32), "w"),
            numpy_helper.from_array(rng.standard_normal((16, 4)).astype(np.float32), "w2"),
            numpy_helper.from_array(np.array([2, 16, 16], np.int64), "s")]
    nodes = [helper.make_node("Reshape", ["x", "s"], ["xr"], name="fold"),
             helper.make_node("MatMul", ["xr", "w"], ["m"], name="bmm"),
             helper.make_node("Add", ["m", "m"], ["r"], name="twice"),
             helper.make_node("MatMul", ["r", "w2"], ["y"], name="head")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 16, 4])], init)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "bmm.onnx")
    np.save(tmp_path / "x.npy", rng.standard_normal((8, 2, 16, 16)).astype(np.float32))
    done = run(["build", "bmm.onnx", "--precision", "int8", "--calib", "x.npy", "--allow-unaccelerated",
                "--include", "bmm", "-q", "--opt-level", "0"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    quantized = onnx.load(tmp_path / "trtforge_out" / "bmm_int8.onnx")
    scales = {i.name: list(i.dims) for i in quantized.graph.initializer if i.name.endswith("_scale")}
    assert any(name.startswith("w_") and dims == [] for name, dims in scales.items()), scales
    assert analyse(onnx.load(tmp_path / "bmm.onnx")).candidates[0].weight == (1, "w", None)
    sidecar = json.loads((tmp_path / "trtforge_out" / "bmm_int8.json").read_text())
    assert sidecar["quantization"]["int8_layers"] == 1, sidecar["quantization"]
