"""``QuantConfig(equalize=True)`` (issue 25): cross-layer equalization and bias absorption as an option of
``quantize_model``: it runs before calibration, is kept only when the quantized graph gets closer to FP32 on
the held-back samples, its record reaches the report, the FP32 graph the plan is computed on is still the
original function (ONNX Runtime, 1e-5), ``placement="auto"`` searches on the equalized graph, and the option
is refused where it has no use, in Python and CLI terms."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from trtforge.core import trt
from trtforge.core.config import CompileConfig, ConfigError, QuantConfig, check_quant_options
from trtforge.core.metrics import per_sample_errors
from trtforge.passes.evaluate import FP32_TOLERANCE
from trtforge.passes.graph import load_ir, ort_session, to_proto
from trtforge.quantize.methods.equalize import equalize_for_quantization
from trtforge.quantize.quantizer import quantize_model

REFUSAL = "equalize=True (--equalize) is for one W8A8 precision (int8, fp8), not {}: drop it"


def skewed_chain(misleading: bool = False) -> onnx.ModelProto:
    """Conv → ReLU6 → 1×1 Conv → ReLU6 → 1×1 Conv → mean (ONNX helper, PyTorch's default init), with half the
    middle channels 20× smaller than the rest and the second conv's matching input columns 20× larger: its
    per-output-channel INT8 weight scale and the middle tensor's per-tensor scale are both set by the large half,
    so the small half loses about four bits. Equalization moves the factor back into the first conv (whose own
    per-channel scale absorbs it). A quarter of the first conv's channels get a bias of 2.5 (biases to absorb).

    ``misleading``: no skew, but the even rows of the first conv are 50× larger on input channel 2, which the
    samples of ``_samples(misleading=True)`` leave almost empty: large weights, small activations. Equalization,
    which reads only the weights, then shrinks those channels and blows up their columns in the second conv."""
    rng = np.random.default_rng(0)

    def conv(name: str, cin: int, cout: int, k: int) -> tuple[np.ndarray, np.ndarray]:
        bound = 1 / np.sqrt(cin * k * k)
        return (rng.uniform(-bound, bound, (cout, cin, k, k)).astype(np.float32),
                rng.uniform(-bound, bound, cout).astype(np.float32))

    (w1, b1), (w2, b2), (w3, b3) = conv("c1", 3, 32, 3), conv("c2", 32, 32, 1), conv("c3", 32, 8, 1)
    if misleading:
        w1[::2, 2] *= 50
    else:
        w1[::2] *= 0.05
        b1[::2] *= 0.05
        w2[:, ::2] *= 20
    b1[1::4] += 2.5
    inits = [numpy_helper.from_array(a, n) for a, n in ((w1, "c1.weight"), (b1, "c1.bias"), (w2, "c2.weight"),
             (b2, "c2.bias"), (w3, "c3.weight"), (b3, "c3.bias"), (np.float32(0), "zero"), (np.float32(6), "six"))]
    nodes = [helper.make_node("Conv", ["x", "c1.weight", "c1.bias"], ["h1"], "c1", pads=[1, 1, 1, 1]),
             helper.make_node("Clip", ["h1", "zero", "six"], ["a1"], "relu6_1"),
             helper.make_node("Conv", ["a1", "c2.weight", "c2.bias"], ["h2"], "c2"),
             helper.make_node("Clip", ["h2", "zero", "six"], ["a2"], "relu6_2"),
             helper.make_node("Conv", ["a2", "c3.weight", "c3.bias"], ["h3"], "c3"),
             helper.make_node("ReduceMean", ["h3"], ["y"], "mean", axes=[2, 3], keepdims=0)]
    graph = helper.make_graph(nodes, "skewed", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _samples(misleading: bool = False) -> np.ndarray:
    x = np.random.default_rng(0).standard_normal((40, 3, 16, 16)).astype(np.float32)
    if misleading:
        x[:, 2] *= 0.001
    return x


@pytest.fixture(scope="module")
def skewed():
    return load_ir(skewed_chain()), _samples()


def _config(**overrides) -> QuantConfig:
    return QuantConfig(**{"bias_correction": False, "task": "other", "include": ("Conv",), **overrides})


def _moved(a, b, x: np.ndarray) -> float:
    """Largest relative L2 change of one sample's output between graphs ``a`` and ``b`` in ONNX Runtime."""
    ya, yb = (ort_session(m).run(None, {"x": x})[0] for m in (a, b))
    return float(per_sample_errors([ya], [yb])[0].max())


def test_equalization_is_kept_where_it_helps_and_the_plans_graph_is_the_original_function(skewed):
    model, x = skewed
    plain = quantize_model(model, x, _config(), progress=False)
    result = quantize_model(model, x, _config(equalize=True), progress=False)
    report = result.report
    assert report["equalize"] is True and plain.report["equalize"] is False and "methods" not in plain.report
    record = report["equalization"]
    assert record["applied"] and record["pairs"] == 2 and record["layers"] == ["c1", "c2"]
    # Its "before" is today's graph at the same placement; "after" is what the plan now reaches.
    assert record["rel_l2_before"] == pytest.approx(plain.report["measured"]["rel_l2_mean"], rel=1e-6)
    assert record["rel_l2_after"] == pytest.approx(report["measured"]["rel_l2_mean"], rel=1e-6)
    assert record["rel_l2_after"] < 0.25 * record["rel_l2_before"], record
    (method,) = report["methods"]
    assert method["method"] == "equalization" and method["applied"] and method["seconds"] > 0
    assert method["held_back"]["rel_l2_mean"] == pytest.approx(record["rel_l2_after"])
    # The plan's FP32 graph: other weights (c2's input columns evened out), the same function on every sample.
    original = model.graph.initializers["c2.weight"].const_value.numpy()
    equalized = result.fp32.graph.initializers["c2.weight"].const_value.numpy()
    assert np.abs(equalized - original).max() > 0.5 * np.abs(original).max()
    assert _moved(model, result.fp32, x) < FP32_TOLERANCE
    assert {layer.label for layer in result.plan.layers} == {"c1", "c2", "c3"}


def test_equalization_that_hurts_is_not_kept():
    model, x = load_ir(skewed_chain(misleading=True)), _samples(misleading=True)
    plain = quantize_model(model, x, _config(), progress=False)
    result = quantize_model(model, x, _config(equalize=True), progress=False)
    record = result.report["equalization"]
    assert not record["applied"] and record["rel_l2_after"] > 1.5 * record["rel_l2_before"], record
    assert result.report["methods"][0]["held_back"]["rel_l2_mean"] == pytest.approx(record["rel_l2_after"])
    assert result.report["measured"] == plain.report["measured"]  # today's graph and plan
    np.testing.assert_array_equal(result.fp32.graph.initializers["c2.weight"].const_value.numpy(),
                                  model.graph.initializers["c2.weight"].const_value.numpy())


def test_auto_placement_searches_the_equalized_graph_and_keeps_more_in_int8(skewed):
    """At the same budget the search on the equalized graph gives fewer MACs back to FP16."""
    model, x = skewed
    config = _config(placement="auto", include=(), error_budget=0.02)
    plain = quantize_model(model, x, config, progress=False)
    result = quantize_model(model, x, _config(placement="auto", include=(), error_budget=0.02, equalize=True),
                            progress=False)
    assert result.report["equalization"]["applied"] and result.report["auto_placement"]
    assert plain.plan.coverage < 0.9 and result.plan.coverage > plain.plan.coverage
    assert result.report["error_budget"]["holds"]
    assert _moved(model, result.fp32, x) < FP32_TOLERANCE  # the search ran on the equalized graph, kept here


def test_bias_absorption_that_moves_unseen_outputs_is_dropped(skewed):
    """The chain's high-bias channels are absorbed with the shift measured on 8 samples; on 32 others some
    pre-activations go below it, the FP32 outputs move beyond 1e-5, and only the (exact) equalization is kept.
    Checked on the same 8 samples the absorption holds: the check can pass."""
    model, x = skewed
    batches = [{"x": x[:8]}]
    graph, info = equalize_for_quantization(model, batches, [{"x": x[8:]}])
    assert info["absorbed_channels"] > 0 and info["absorption"] == "dropped"
    assert info["absorbed_fp32_rel_l2_max"] > FP32_TOLERANCE >= info["fp32_rel_l2_max"]
    assert _moved(model, graph, x) < FP32_TOLERANCE
    kept, same = equalize_for_quantization(model, batches, batches)
    assert same["absorption"] == "applied" and same["fp32_rel_l2_max"] <= FP32_TOLERANCE
    assert _moved(model, kept, x[8:]) > FP32_TOLERANCE  # what the check on unseen samples caught


@pytest.mark.parametrize("precision", ["int8-wo", "int4-wo", "auto"])
def test_equalize_is_refused_where_it_has_no_use(precision):
    with pytest.raises(ConfigError) as caught:
        check_quant_options(QuantConfig(equalize=True, error_budget=0.1), precision)
    assert str(caught.value) == REFUSAL.format(precision)
    with pytest.raises(ConfigError, match=r"equalize=True \(--equalize\)"):
        CompileConfig(precision=precision, quant=QuantConfig(equalize=True, error_budget=0.1))
    for w8a8 in ("int8", "fp8"):
        check_quant_options(QuantConfig(equalize=True), w8a8)


def test_weight_only_quantize_model_refuses_before_any_work():
    with pytest.raises(ConfigError, match=r"not int8-wo: drop it"):  # before the graph or the data are read
        quantize_model(onnx.ModelProto(), object(), QuantConfig(equalize=True), progress=False, precision="int8-wo")


def test_the_cli_flag_parses_and_is_refused_in_cli_terms(tmp_path):
    from typer.testing import CliRunner

    from trtforge.cli import app
    from trtforge.cli.build import BUILD_PARAMETERS, QUANT_PARAMETERS, config_from_cli

    defaults = {p.name: p.signature().default for p in BUILD_PARAMETERS + QUANT_PARAMETERS}
    assert defaults["equalize"] is False
    config = config_from_cli({**defaults, "precision": "int8", "equalize": True})
    assert config.quant.equalize is True
    np.save(tmp_path / "x.npy", np.zeros((4, 3, 8, 8), np.float32))
    refused = CliRunner().invoke(app, ["build", str(tmp_path / "none.onnx"), "--precision", "int4-wo", "--equalize",
                                       "--calib", str(tmp_path / "x.npy"), "-o", str(tmp_path / "out")])
    text = " ".join(refused.output.split())
    assert refused.exit_code == 2 and REFUSAL.format("int4-wo") in text and "Traceback" not in text, text
    assert "--equalize" in " ".join(CliRunner().invoke(app, ["build", "--help"]).output.split())


@pytest.mark.skipif(not trt.info().is_rtx, reason="TensorRT-RTX builds")
def test_the_equalization_record_reaches_the_sidecar_of_a_real_build(skewed, tmp_path):
    import trtforge

    model, x = skewed
    path = tmp_path / "skewed.onnx"
    onnx.save(to_proto(model), str(path))
    art = trtforge.compile(path, precision="int8", calibration_data=x, output_dir=tmp_path / "out", progress=False,
                           cache=False, allow_unaccelerated=True, quant=_config(equalize=True))
    quant = art.sidecar.quantization
    assert quant.equalize is True and quant.equalization["applied"] and quant.equalization["pairs"] == 2
    assert [m["method"] for m in quant.methods] == ["equalization"]
    saved = (tmp_path / "out").rglob("*.json")
    assert any('"equalization"' in p.read_text() for p in saved)


def test_the_printed_report_says_whether_bias_absorption_was_kept(capsys, monkeypatch):
    """A dropped absorption is not printed as biases absorbed (the record keeps the channels it tried)."""
    from trtforge.quantize.report import print_report

    monkeypatch.setenv("COLUMNS", "250")  # one table row per line

    base = {"calibrator": "mse", "placement": "default", "samples": {"calibration": 8, "held_back": 2},
            "int8_layers": 3, "layers_total": 3, "coverage": 1.0,
            "measured": {"rel_l2_mean": 0.1, "rel_l2_max": 0.2, "cosine_mean": 0.99, "cosine_min": 0.98}}
    for absorption in ("dropped", "applied"):
        print_report({**base, "equalization": {"applied": True, "pairs": 2, "absorption": absorption,
                                               "absorbed_channels": 8, "rel_l2_before": 0.2, "rel_l2_after": 0.1}})
        assert f"bias absorption {absorption}" in capsys.readouterr().out
