"""Quantization-aware fine-tuning (issue 25): ``trtforge.quantize.methods.torch_graph`` evaluates ONNX graphs as ONNX
Runtime does; ``trtforge.quantize.methods.distill`` lowers the held-back error of a plan (samples it never trained on),
and the Q/DQ graph it writes back computes in ONNX Runtime what its torch fake-quant model computed;
``QuantConfig(finetune_seconds=...)`` runs it in ``quantize_model`` (kept only when it helps, recorded in the
report and the sidecar) and is refused where it cannot apply, in one line."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from trtforge.core.config import CompileConfig, ConfigError, QuantConfig, check_quant_options
from trtforge.core.errors import InvalidArgument
from trtforge.core.metrics import per_sample_errors
from trtforge.core.sidecar_records import QuantizationRecord
from trtforge.passes.graph import load_ir, ort_session
from trtforge.passes.qdq import apply_plan
from trtforge.quantize.methods.distill import FinetuneOptions, fake_quant_inputs, finetune
from trtforge.quantize.methods.torch_graph import TorchGraph
from trtforge.quantize.quantizer import quantize_model

REFUSAL = "finetune_seconds= (--finetune-seconds) fine-tunes INT8 (W8A8) weights, not {}: drop it, or build with precision int8"


def _init(rng, shape, scale=None) -> np.ndarray:
    bound = scale if scale is not None else 1 / np.sqrt(np.prod(shape[1:]))
    return rng.uniform(-bound, bound, shape).astype(np.float32)


def cnn() -> onnx.ModelProto:
    """Conv (asymmetric pads) → ReLU6 → depthwise Conv → HardSwish → MaxPool → 1×1 Conv → Relu → AveragePool →
    GlobalAveragePool → Flatten → Gemm (transB) → Add, with wide-range channels and depthwise kernels whose
    centre tap sets the per-channel weight scale (INT8 loses a few bits of the others)."""
    rng = np.random.default_rng(0)
    w1, w2 = _init(rng, (16, 3, 3, 3)), _init(rng, (16, 1, 3, 3))
    w1[::3] *= 30
    w2[:, 0, 1, 1] *= 30  # one large tap per depthwise channel: the other taps keep few INT8 levels
    arrays = {"w1": w1, "b1": _init(rng, (16,), 0.5), "w2": w2, "b2": _init(rng, (16,), 0.1),
              "w3": _init(rng, (24, 16, 1, 1)), "b3": _init(rng, (24,), 0.1), "w4": _init(rng, (10, 24)),
              "b4": _init(rng, (10,), 0.1), "zero": np.float32(0), "six": np.float32(6), "shift": _init(rng, (10,))}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["h1"], "c1", pads=[0, 0, 1, 1], strides=[2, 2]),
             helper.make_node("Clip", ["h1", "zero", "six"], ["a1"], "relu6"),
             helper.make_node("Conv", ["a1", "w2", "b2"], ["h2"], "dw", group=16, pads=[1, 1, 1, 1]),
             helper.make_node("HardSwish", ["h2"], ["a2"], "hswish"),
             helper.make_node("MaxPool", ["a2"], ["p2"], "maxpool", kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p2", "w3", "b3"], ["h3"], "c3"),
             helper.make_node("Relu", ["h3"], ["a3"], "relu"),
             helper.make_node("AveragePool", ["a3"], ["p3"], "avg", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("GlobalAveragePool", ["p3"], ["g"], "gap"),
             helper.make_node("Flatten", ["g"], ["f"], "flatten"),
             helper.make_node("Gemm", ["f", "w4", "b4"], ["logits"], "fc", transB=1),
             helper.make_node("Add", ["logits", "shift"], ["y"], "shifted")]
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 3, 17, 17])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 10])],
                              [numpy_helper.from_array(a, n) for n, a in arrays.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


def encoder() -> onnx.ModelProto:
    """A BERT-style block with the ops of the issue's OCR and text models: Gather (embedding), MatMul + Add,
    Reshape/Transpose heads, Softmax attention, LayerNormalization, the ReduceMean/Sub/Pow/Sqrt/Div form of
    LayerNorm, Erf GELU, Slice, Concat, Unsqueeze/Squeeze, Shape, Cast, Where, Sigmoid, HardSigmoid."""
    rng = np.random.default_rng(1)
    d, heads = 16, 2
    arrays = {"emb": _init(rng, (30, d), 1.0), "wq": _init(rng, (d, d)), "wk": _init(rng, (d, d)),
              "wv": _init(rng, (d, d)), "bq": _init(rng, (d,), 0.1), "w1": _init(rng, (d, 32)), "w2": _init(rng, (32, d)),
              "gamma": 1 + _init(rng, (d,), 0.1), "beta": _init(rng, (d,), 0.1), "heads": np.array([0, 0, heads, d // heads]),
              "merge": np.array([0, 0, d]), "half": np.float32(0.5), "one": np.float32(1), "sqrt2": np.float32(np.sqrt(2)),
              "two": np.float32(2), "eps": np.float32(1e-5), "axes1": np.array([1]), "axis_last": np.array([-1]),
              "start": np.array([1]), "end": np.array([4]), "slice_axis": np.array([2]), "neg": np.float32(-1e4)}
    n = helper.make_node
    nodes = [n("Gather", ["emb", "ids"], ["e"], "embed"),
             n("LayerNormalization", ["e", "gamma", "beta"], ["ln"], "ln", axis=-1, epsilon=1e-5),
             n("MatMul", ["ln", "wq"], ["q0"], "q"), n("Add", ["q0", "bq"], ["q1"], "q_bias"),
             n("MatMul", ["ln", "wk"], ["k0"], "k"), n("MatMul", ["ln", "wv"], ["v0"], "v"),
             n("Reshape", ["q1", "heads"], ["qh"], "qh"), n("Transpose", ["qh"], ["qt"], "qt", perm=[0, 2, 1, 3]),
             n("Reshape", ["k0", "heads"], ["kh"], "kh"), n("Transpose", ["kh"], ["kt"], "kt", perm=[0, 2, 3, 1]),
             n("Reshape", ["v0", "heads"], ["vh"], "vh"), n("Transpose", ["vh"], ["vt"], "vt", perm=[0, 2, 1, 3]),
             n("MatMul", ["qt", "kt"], ["s"], "scores"),
             n("Cast", ["mask"], ["maskf"], "cast", to=TensorProto.BOOL),
             n("Unsqueeze", ["maskf", "axes1"], ["m1"], "unsq"), n("Where", ["m1", "s", "neg"], ["sm"], "where"),
             n("Softmax", ["sm"], ["attn"], "softmax", axis=-1), n("MatMul", ["attn", "vt"], ["ctx"], "ctx"),
             n("Transpose", ["ctx"], ["ct"], "ct", perm=[0, 2, 1, 3]), n("Reshape", ["ct", "merge"], ["c"], "merge"),
             n("Add", ["c", "e"], ["r"], "residual"),
             n("ReduceMean", ["r", "axis_last"], ["mu"], "mean"), n("Sub", ["r", "mu"], ["xc"], "center"),
             n("Pow", ["xc", "two"], ["sq"], "square"), n("ReduceMean", ["sq", "axis_last"], ["var"], "var"),
             n("Add", ["var", "eps"], ["ve"], "var_eps"), n("Sqrt", ["ve"], ["sd"], "sd"),
             n("Div", ["xc", "sd"], ["ln2"], "norm"),
             n("MatMul", ["ln2", "w1"], ["f1"], "ff1"), n("Div", ["f1", "sqrt2"], ["f2"], "gelu_div"),
             n("Erf", ["f2"], ["f3"], "erf"), n("Add", ["f3", "one"], ["f4"], "gelu_add"),
             n("Mul", ["f1", "f4"], ["f5"], "gelu_mul"), n("Mul", ["f5", "half"], ["f6"], "gelu_half"),
             n("MatMul", ["f6", "w2"], ["f7"], "ff2"), n("Sigmoid", ["f7"], ["g1"], "sigmoid"),
             n("HardSigmoid", ["f7"], ["g2"], "hsig", alpha=0.25, beta=0.4), n("Concat", ["g1", "g2"], ["cat"], "cat", axis=-1),
             n("Slice", ["cat", "start", "end", "slice_axis"], ["sl"], "slice"),
             n("Shape", ["sl"], ["shape"], "shape"), n("Cast", ["shape"], ["shape_f"], "shape_f", to=TensorProto.FLOAT),
             n("ReduceMean", ["sl", "axis_last"], ["pooled"], "pool", keepdims=1),
             n("Squeeze", ["pooled", "axis_last"], ["y"], "squeeze")]
    inputs = [helper.make_tensor_value_info("ids", TensorProto.INT64, [None, 8]),
              helper.make_tensor_value_info("mask", TensorProto.INT64, [None, 8, 8])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 8]),
               helper.make_tensor_value_info("shape_f", TensorProto.FLOAT, [3])]
    graph = helper.make_graph(nodes, "encoder", inputs, outputs, [numpy_helper.from_array(a, k) for k, a in arrays.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


def _images(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 3, 17, 17)).astype(np.float32)


def _torch_out(graph: TorchGraph, feeds: dict[str, np.ndarray], inputs=None) -> list[np.ndarray]:
    with torch.no_grad():
        return [y.numpy() for y in graph.forward({k: torch.from_numpy(v) for k, v in feeds.items()}, inputs=inputs)]


@pytest.mark.parametrize("make", [cnn, encoder])
def test_the_interpreter_computes_what_onnx_runtime_computes(make):
    model = load_ir(make())
    rng = np.random.default_rng(3)
    feeds = ({"x": _images(4, 3)} if make is cnn else
             {"ids": rng.integers(0, 30, (4, 8)), "mask": (rng.random((4, 8, 8)) > 0.2).astype(np.int64)})
    expected = ort_session(model).run(None, feeds)
    got = _torch_out(TorchGraph(model), feeds)
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        assert g.shape == e.shape
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5)


def test_an_op_without_a_torch_form_is_refused_in_one_line_before_any_work():
    proto = cnn()
    proto.graph.node[3].op_type = "Mish"  # ONNX op, not in the interpreter's table
    with pytest.raises(InvalidArgument) as caught:
        quantize_model(proto, _images(20, 0), QuantConfig(finetune_seconds=5, task="other"), progress=False)
    assert str(caught.value) == ("finetune_seconds= (--finetune-seconds) evaluates the graph in PyTorch, which has no "
                                 "Mish here; drop the option for this model")


@pytest.fixture(scope="module")
def planned():
    """The CNN's INT8 plan with every Conv/Gemm (no bias correction: the graph the plan reads is the original)."""
    model = load_ir(cnn())
    result = quantize_model(model, _images(40, 0), QuantConfig(include=("Conv", "Gemm"), bias_correction=False,
                                                               task="other"), progress=False)
    return result.fp32, result.plan


def _held_rel_l2(reference, model, plan, x: np.ndarray) -> float:
    ref = ort_session(reference).run(None, {"x": x})
    out = ort_session(apply_plan(model, plan)).run(None, {"x": x})
    return float(per_sample_errors(ref, out)[0].mean())


def test_fine_tuning_lowers_the_error_on_samples_it_never_saw(planned):
    model, plan = planned
    assert len(plan.layers) == 4
    train = [{"x": _images(64, 10)}]
    held = _images(64, 11)  # other samples: never trained on
    tuned, info = finetune(model, plan, train, max_seconds=600, options=FinetuneOptions(max_steps=150, lr=0.005))
    before, after = _held_rel_l2(model, model, plan, held), _held_rel_l2(model, tuned, plan, held)
    assert info["steps"] == 150 and info["weights"] == 4 and info["biases"] == 4 and info["samples"] == 64
    assert after < 0.95 * before, (before, after)  # measured: 0.0080 → 0.0071
    # Only the plan's weights and biases moved; every weight is on the plan's INT8 grid (q·s).
    for layer in plan.layers:
        q = layer.weight
        w = tuned.graph.initializers[q.tensor].const_value.numpy()
        scales = np.asarray(q.scales, np.float32).reshape((-1,) + (1,) * (w.ndim - 1))
        np.testing.assert_allclose(w / scales, np.round(w / scales), atol=1e-3)
    np.testing.assert_array_equal(tuned.graph.initializers["shift"].const_value.numpy(),
                                  model.graph.initializers["shift"].const_value.numpy())


def test_the_written_back_qdq_graph_computes_what_the_fake_quant_model_computed(planned):
    """ONNX Runtime on ``apply_plan(tuned, plan)`` against the torch forward with the plan's fake quantization of
    the tuned weights (the model fine-tuning optimised); and against the FP32 graph, so the check can fail."""
    model, plan = planned
    tuned, _ = finetune(model, plan, [{"x": _images(32, 10)}], max_seconds=600, options=FinetuneOptions(max_steps=40))
    x = _images(32, 12)
    onnx_out = ort_session(apply_plan(tuned, plan)).run(None, {"x": x})[0]
    torch_out = _torch_out(TorchGraph(tuned), {"x": x}, fake_quant_inputs(plan))[0]
    fp32_out = _torch_out(TorchGraph(tuned), {"x": x})[0]
    mismatch = per_sample_errors([onnx_out], [torch_out])[0]
    assert mismatch.max() < 1e-5, mismatch.max()
    assert per_sample_errors([onnx_out], [fp32_out])[0].mean() > 100 * 1e-5  # INT8 is visible at this tolerance


def test_quantize_model_runs_it_after_placement_keeps_it_only_when_it_helps_and_records_it(planned):
    model, _ = planned
    x = np.concatenate([_images(60, 0), _images(20, 11)])
    base = {"include": ("Conv", "Gemm"), "bias_correction": False, "task": "other"}
    plain = quantize_model(model, x, QuantConfig(**base), progress=False)
    result = quantize_model(model, x, QuantConfig(**base, finetune_seconds=3), progress=False)
    record = result.report["finetune"]
    assert result.report["finetune_seconds"] == 3 and "finetune" not in plain.report
    assert record["steps"] > 5 and record["samples"] == 64 and record["weights"] == 4  # 80 samples, 16 held back
    # "before" is the plan without fine-tuning; the report measures the graph kept, and it is kept only if better.
    assert record["rel_l2_before"] == pytest.approx(plain.report["measured"]["rel_l2_mean"], rel=1e-6)
    assert record["applied"] == (record["rel_l2_after"] < record["rel_l2_before"])
    kept = record["rel_l2_after"] if record["applied"] else record["rel_l2_before"]
    assert result.report["measured"]["rel_l2_mean"] == pytest.approx(kept, rel=1e-6)
    assert result.plan == plain.plan  # the same plan: only weights and biases may differ
    (method,) = result.report["methods"]
    assert method["method"] == "finetune" and method["applied"] == record["applied"] and method["seconds"] >= 3
    assert method["held_back"]["rel_l2_mean"] == pytest.approx(record["rel_l2_after"], rel=1e-6)
    sidecar = QuantizationRecord.from_dict(result.report)
    assert sidecar.finetune_seconds == 3 and sidecar.finetune["steps"] == record["steps"]


@pytest.mark.parametrize("precision", ["fp8", "int8-wo", "int4-wo", "auto"])
def test_finetune_seconds_is_refused_where_it_cannot_apply(precision):
    with pytest.raises(ConfigError) as caught:
        check_quant_options(QuantConfig(finetune_seconds=60, error_budget=0.1), precision)
    assert str(caught.value) == REFUSAL.format(precision)
    with pytest.raises(ConfigError, match=r"finetune_seconds= \(--finetune-seconds\)"):
        CompileConfig(precision=precision, quant=QuantConfig(finetune_seconds=60, error_budget=0.1))
    check_quant_options(QuantConfig(finetune_seconds=60), "int8")


@pytest.mark.parametrize("seconds", [0, -1, True, "60"])
def test_finetune_seconds_must_be_a_positive_number(seconds):
    with pytest.raises(ConfigError, match="give a positive number of seconds"):
        QuantConfig(finetune_seconds=seconds)


def test_the_direct_path_refuses_it():
    from trtforge.quantize.module_quantizer import quantize_module

    with pytest.raises(InvalidArgument, match=r"the direct path's INT8 has no fine-tuning; drop finetune_seconds="):
        quantize_module(torch.nn.Linear(4, 4), ["x"], [], QuantConfig(finetune_seconds=10))


def test_the_cli_flag_parses_and_is_refused_in_cli_terms(tmp_path):
    from typer.testing import CliRunner

    from trtforge.cli import app
    from trtforge.cli.build import BUILD_PARAMETERS, QUANT_PARAMETERS, config_from_cli

    defaults = {p.name: p.signature().default for p in BUILD_PARAMETERS + QUANT_PARAMETERS}
    assert defaults["finetune_seconds"] is None
    assert config_from_cli({**defaults, "precision": "int8", "finetune_seconds": 90.0}).quant.finetune_seconds == 90
    np.save(tmp_path / "x.npy", np.zeros((4, 3, 8, 8), np.float32))
    refused = CliRunner().invoke(app, ["build", str(tmp_path / "none.onnx"), "--precision", "fp8", "--finetune-seconds",
                                       "60", "--calib", str(tmp_path / "x.npy"), "-o", str(tmp_path / "out")])
    text = " ".join(refused.output.split())
    assert refused.exit_code == 2 and REFUSAL.format("fp8") in text and "Traceback" not in text, text


def test_it_must_beat_the_bias_corrected_graph_it_starts_from(planned):
    """Fine-tuning runs last: its "before" is the finished graph (bias correction applied), not the plan without
    bias correction (the first version compared with that and kept a worse graph on Lite0)."""
    model, _ = planned
    x = np.concatenate([_images(60, 0), _images(20, 11)])
    base = {"include": ("Conv", "Gemm"), "task": "other"}
    plain = quantize_model(model, x, QuantConfig(**base), progress=False)
    assert plain.report["bias_correction"]["applied"]
    result = quantize_model(model, x, QuantConfig(**base, finetune_seconds=2), progress=False)
    assert [m["method"] for m in result.report["methods"]] == ["bias_correction", "finetune"]
    assert result.report["finetune"]["rel_l2_before"] == pytest.approx(plain.report["measured"]["rel_l2_mean"], rel=1e-6)
