"""Weight-only INT8/INT4 without calibration data (issue 35, item 12): scales from the weights alone, a real
TensorRT-RTX build, the graph close to FP32 in ONNX Runtime, the sidecar saying no data was used; options that
measure on data refused in one line."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from cli_in_process import run

from trtforge.core.config import ConfigError, QuantConfig
from trtforge.core.ort_session import session
from trtforge.core.sidecar import read_sidecar
from trtforge.passes.graph import constant_value, values_by_name
from trtforge.quantize.quantizer import quantize_model


def _feeds(n: int = 4) -> dict[str, np.ndarray]:
    ids = np.random.default_rng(3).integers(0, 64, (n, 16)).astype(np.int64)
    return {"input_ids": ids, "attention_mask": np.ones_like(ids)}


@pytest.mark.parametrize(("precision", "limit"), [("int8-wo", 0.005), ("int4-wo", 0.03)])
def test_cli_builds_weight_only_without_calib(tiny_bert_onnx, tmp_path, precision, limit):
    """``trtforge build bert.onnx --precision int8-wo`` (no --calib): built by TensorRT-RTX; the graph it built
    from runs in ONNX Runtime close to the FP32 reference; the sidecar says no data was used, and measures nothing."""
    done = run(["build", tiny_bert_onnx, "--precision", precision, "-o", tmp_path, "-q"])
    assert done.returncode == 0, done.stderr
    [sidecar] = [p for p in tmp_path.glob("*.json") if "reference" not in p.name]
    record = read_sidecar(sidecar)
    quant = record.quantization
    assert quant.precision == precision and quant.calibration_data.startswith("none")
    assert quant.measured is None and quant.error_budget is None
    assert quant.quantized_layers == 12 and quant.samples == {"calibration": 0, "held_back": 0}  # 2 × (Q, K, V, O, 2 FFN)
    engine = sidecar.with_suffix(".engine")
    assert engine.stat().st_size > 0
    graph = onnx.load(sidecar.with_suffix(".onnx"))
    weight_type = {"int8-wo": onnx.TensorProto.INT8, "int4-wo": onnx.TensorProto.INT4}[precision]
    assert weight_type in {t.data_type for t in graph.graph.initializer}
    reference = session(tiny_bert_onnx).run(None, _feeds())[0]
    quantized = session(graph.SerializeToString()).run(None, _feeds())[0]
    rel = np.linalg.norm(quantized - reference) / np.linalg.norm(reference)
    assert 0 < rel < limit, rel


def test_python_weight_only_without_data_is_the_absmax_grid(tiny_bert_onnx):
    """quantize_model(..., None, precision='int4-wo'): every weight on its block's absmax grid (scale = absmax/7)."""
    result = quantize_model(onnx.load(tiny_bert_onnx), None, QuantConfig(), progress=False, precision="int4-wo")
    assert result.report["calibration_data"].startswith("none") and result.report["measured"] is None
    layer = result.plan.layers[0]
    [weight] = [q for q in layer.inputs if q.is_weight]
    w = constant_value(values_by_name(result.fp32.graph)[weight.tensor])
    blocks = np.abs(w).reshape(w.shape[0] // weight.block_size, weight.block_size, w.shape[1]).max(axis=1)
    np.testing.assert_allclose(np.asarray(weight.scales, np.float32).reshape(blocks.shape), blocks / 7, rtol=1e-3)


@pytest.mark.parametrize(("options", "message"), [
    (["--precision", "int4-wo", "--awq"], r"--awq measure\(s\) on calibration data.*add --calib DATA, or drop --awq"),
    (["--precision", "int4-wo", "--rounding", "gptq"], r"--rounding gptq measure\(s\) on calibration data"),
    (["--precision", "int8-wo", "--placement", "auto", "--error-budget", "0.1"],
     r"--placement auto, --error-budget 0\.1 measure\(s\) on calibration data"),
    (["--precision", "int8-wo", "--strict-accuracy"], r"--strict-accuracy measure\(s\) on calibration data"),
    (["--precision", "fp8", "--target", "sm89"], r"--precision fp8 needs --calib DATA .*only int8-wo/int4-wo build"),
])
def test_options_that_need_data_are_refused_in_one_line(tiny_bert_onnx, tmp_path, options, message):
    done = run(["build", tiny_bert_onnx, *options, "-o", tmp_path])
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert __import__("re").search(message, done.stderr), done.stderr
    assert not list(tmp_path.glob("*.engine"))


def test_python_refusal_names_python_arguments(tiny_bert_onnx):
    with pytest.raises(ConfigError, match=r"awq=True measure\(s\) on calibration data.*add calibration_data="):
        quantize_model(onnx.load(tiny_bert_onnx), None, QuantConfig(awq=True), progress=False, precision="int4-wo")
