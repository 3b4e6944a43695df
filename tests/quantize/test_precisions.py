"""FP8 (E4M3) and weight-only INT8/INT4: the Q/DQ graphs against NumPy references, the options, real builds."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
import torch

from trtforge.core import trt
from trtforge.core.config import PRECISIONS, QUANTIZED_PRECISIONS, CompileConfig, ConfigError, QuantConfig
from trtforge.core.errors import InvalidArgument
from trtforge.core.ort_session import session
from trtforge.passes.graph import to_proto
from trtforge.quantize.calibrators import mse_amax
from trtforge.quantize.precision import SPECS, spec_of
from trtforge.quantize.quantizer import quantize_model

F8 = onnx.TensorProto.FLOAT8E4M3FN


class Mlp(torch.nn.Module):
    """Two Linear layers (MatMul on a rank-3 input) and a Gemm head; K = 256 and 128."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(256, 128)
        self.fc2 = torch.nn.Linear(128, 128)
        self.head = torch.nn.Linear(128, 10)

    def forward(self, x):
        y = self.fc2(torch.relu(self.fc1(x)))
        return self.head(torch.relu(y).mean(1))


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("mlp") / "mlp.onnx"
    torch.onnx.export(Mlp().eval(), (torch.randn(1, 4, 256),), str(path), input_names=["x"], output_names=["y"],
                      dynamo=False, opset_version=19, dynamic_axes={"x": {0: "b"}, "y": {0: "b"}})
    x = np.random.default_rng(0).standard_normal((40, 4, 256)).astype(np.float32)
    x[..., :8] *= 20  # a few outlier channels, as transformers have
    return onnx.load(str(path)), x


def _fp8(values: np.ndarray) -> np.ndarray:
    return np.clip(values, -448, 448).astype(ml_dtypes.float8_e4m3fn).astype(np.float32)


def test_vocabulary_is_one():
    assert set(QUANTIZED_PRECISIONS) <= set(PRECISIONS)
    assert tuple(SPECS) == QUANTIZED_PRECISIONS
    for precision in QUANTIZED_PRECISIONS:
        assert CompileConfig(precision=precision).float_dtype == "float16"
        assert CompileConfig(precision=precision).possible_precisions == (precision, "fp16")


def test_fp8_graph_matches_numpy_reference(mlp):
    """FLOAT8E4M3FN zero points, opset 19, scale = amax/448; ORT computes what E4M3 rounding in NumPy gives."""
    proto, x = mlp
    result = quantize_model(proto, x, QuantConfig(calibrator="max", bias_correction=False), progress=False,
                            precision="fp8")
    sim = result.sim_model
    assert max(o.version for o in sim.opset_import if o.domain in ("", "ai.onnx")) >= 19
    zps = [t for t in sim.graph.initializer if t.name.endswith("_zp")]
    assert zps and {t.data_type for t in zps} == {F8}
    assert result.plan.coverage == 1.0 and result.report["precision"] == "fp8"
    # fc1 alone, against NumPy: y = fp8(x/sa)*sa @ (fp8(W/sw)*sw) + b, W per output channel.
    fc1 = next(layer for layer in result.plan.layers if "fc1" in layer.label)
    act, weight = fc1.inputs
    amax = float(np.abs(x).max())
    assert act.scales[0] == pytest.approx(amax / 448, rel=1e-3)  # max calibrator, FP16-rounded
    init = {t.name: onnx.numpy_helper.to_array(t) for t in proto.graph.initializer}
    w = next(v for v in init.values() if v.shape == (256, 128))
    b = init["fc1.bias"]
    sw = np.asarray(weight.scales, np.float32)
    ref = _fp8(x[:8] / act.scales[0]) * act.scales[0] @ (_fp8(w / sw) * sw) + b
    from trtforge.passes.qdq import apply_plan

    only = to_proto(apply_plan(result.fp32, result.plan.only([fc1.output])))
    add = next(n.output[0] for n in only.graph.node if n.op_type == "Add")  # fc1's bias Add
    got = session(_with_output(only, add).SerializeToString()).run([add], {"x": x[:8]})[0]
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-3)


def _with_output(model: onnx.ModelProto, name: str) -> onnx.ModelProto:
    model = onnx.ModelProto.FromString(model.SerializeToString())
    model.graph.output.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    return model


def test_fp8_relu_survives_onnxruntime():
    """A Relu in front of an FP8 QuantizeLinear stays a Relu (onnxruntime's ReluQuantRewrite drops it)."""
    h, nh = onnx.helper, onnx.numpy_helper
    graph = h.make_graph(
        [h.make_node("Relu", ["x"], ["r"]), h.make_node("QuantizeLinear", ["r", "s", "z"], ["q"]),
         h.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])], "g",
        [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4])],
        [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4])],
        [nh.from_array(np.array(0.05, np.float32), "s"), h.make_tensor("z", F8, [], b"\x00", raw=True)])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 19)])
    y = session(model.SerializeToString()).run(None, {"x": np.array([-3, -1, 1, 3], np.float32)})[0]
    assert (y[:2] == 0).all() and y[3] == pytest.approx(3, rel=0.1)


def test_fp8_clip_runs_in_onnxruntime_and_still_clips():
    """Conv → Clip (ReLU6) → FP8 QuantizeLinear: onnxruntime's ClipQuantRewrite refused to create the
    session (it read the FP8 zero point as an integer range); with it off, the graph clips to [0, 6]."""
    h, nh = onnx.helper, onnx.numpy_helper
    graph = h.make_graph(
        [h.make_node("Conv", ["x", "w"], ["c"]), h.make_node("Clip", ["c", "lo", "hi"], ["r"]),
         h.make_node("QuantizeLinear", ["r", "s", "z"], ["q"]), h.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])],
        "g", [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 1, 1, 4])],
        [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 1, 1, 4])],
        [nh.from_array(np.ones((1, 1, 1, 1), np.float32), "w"), nh.from_array(np.array(0.0, np.float32), "lo"),
         nh.from_array(np.array(6.0, np.float32), "hi"), nh.from_array(np.array(0.05, np.float32), "s"),
         h.make_tensor("z", F8, [], b"\x00", raw=True)])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 19)])
    y = session(model.SerializeToString()).run(None, {"x": np.array([[[[-3, 1, 5, 9]]]], np.float32)})[0].ravel()
    assert y[0] == 0 and y[1] == pytest.approx(1, rel=0.1) and y[3] == pytest.approx(6, rel=0.1)


def test_mse_on_the_fp8_grid_clips_less_than_on_int8():
    """E4M3's relative precision makes clipping less worth it than on INT8's uniform grid."""
    rng = np.random.default_rng(1)
    values = np.abs(rng.standard_t(3, 200_000))
    counts, edges = np.histogram(values, bins=2048, range=(0, values.max()))
    fp8 = mse_amax(counts, edges, qtype=SPECS["fp8"].activation_qtype)
    int8 = mse_amax(counts, edges)
    assert int8 < fp8 <= values.max() + 1e-6


@pytest.mark.parametrize("precision", ["int8-wo", "int4-wo"])
def test_weight_only_is_dq_only_and_matches_numpy(mlp, precision):
    proto, x = mlp
    result = quantize_model(proto, x, QuantConfig(bias_correction=False), progress=False, precision=precision)
    sim = result.sim_model
    ops = [n.op_type for n in sim.graph.node]
    assert "QuantizeLinear" not in ops  # activations stay float
    assert len(result.plan.layers) == 3 and not result.plan.excluded  # every MatMul/Gemm weight
    weights = [t for t in sim.graph.initializer if t.name.endswith(("_int8", "_int4"))]
    assert {t.data_type for t in weights} == {onnx.TensorProto.INT4 if precision == "int4-wo" else onnx.TensorProto.INT8}
    dqs = [n for n in sim.graph.node if n.op_type == "DequantizeLinear"]
    blocks = {a.i for n in dqs for a in n.attribute if a.name == "block_size"}
    assert blocks == ({128} if precision == "int4-wo" else set())
    if precision == "int4-wo":
        assert max(o.version for o in sim.opset_import if o.domain in ("", "ai.onnx")) >= 21
    # NumPy reference for fc1: x @ dequantized W (INT4: absmax blocks of 128 rows along K).
    init = {t.name: onnx.numpy_helper.to_array(t) for t in proto.graph.initializer}
    w = next(v for v in init.values() if v.shape == (256, 128))
    qmax = 7 if precision == "int4-wo" else 127
    if precision == "int4-wo":
        s = np.abs(w.reshape(2, 128, 128)).max(axis=1) / qmax
        s = np.repeat(s.astype(np.float16).astype(np.float32), 128, axis=0)
    else:
        s = (np.abs(w).max(axis=0) / qmax).astype(np.float16).astype(np.float32)
    deq = np.clip(np.round(w / s), -qmax, qmax) * s
    fc1 = next(layer for layer in result.plan.layers if "fc1" in layer.label)
    from trtforge.passes.qdq import apply_plan

    only = to_proto(apply_plan(result.fp32, result.plan.only([fc1.output])))
    matmul = next(n for n in only.graph.node if n.op_type == "MatMul")
    got = session(_with_output(only, matmul.output[0]).SerializeToString()).run([matmul.output[0]], {"x": x[:4]})[0]
    np.testing.assert_allclose(got, x[:4] @ deq, rtol=1e-4, atol=1e-3)
    assert result.report["measured"]["cosine_mean"] > (0.999 if precision == "int8-wo" else 0.99)


def _one_linear(tmp_path) -> onnx.ModelProto:
    torch.manual_seed(1)
    path = tmp_path / "linear.onnx"
    torch.onnx.export(torch.nn.Linear(256, 64).eval(), (torch.randn(1, 4, 256),), str(path), input_names=["x"],
                      output_names=["y"], dynamo=False, opset_version=19, dynamic_axes={"x": {0: "b"}, "y": {0: "b"}})
    return onnx.load(str(path))


def test_awq_lowers_int4_error_where_activations_have_outlier_channels(tmp_path):
    x = np.random.default_rng(2).standard_normal((40, 4, 256)).astype(np.float32)
    x[..., :16] *= 30
    proto = _one_linear(tmp_path)
    plain = quantize_model(proto, x, QuantConfig(bias_correction=False), progress=False, precision="int4-wo")
    awq = quantize_model(proto, x, QuantConfig(bias_correction=False, awq=True), progress=False, precision="int4-wo")
    info = awq.report["awq"]
    assert info["applied"] and info["layers"] == 1 and info["rel_l2_after"] < 0.95 * info["rel_l2_before"]
    assert awq.report["measured"]["rel_l2_mean"] < 0.95 * plain.report["measured"]["rel_l2_mean"]
    assert any(n.op_type == "Mul" and n.name.endswith("__awq_Mul") for n in awq.sim_model.graph.node)


def test_awq_is_dropped_when_the_held_back_error_does_not_improve(mlp):
    """On the MLP, AWQ lowers each layer's own error but not the held-back output error: it is not kept."""
    proto, x = mlp
    plain = quantize_model(proto, x, QuantConfig(bias_correction=False), progress=False, precision="int4-wo")
    awq = quantize_model(proto, x, QuantConfig(bias_correction=False, awq=True), progress=False, precision="int4-wo")
    info = awq.report["awq"]
    assert info["layers"] >= 1 and not info["applied"] and info["rel_l2_after"] >= info["rel_l2_before"]
    assert awq.report["measured"] == plain.report["measured"]
    assert not any(n.name.endswith("__awq_Mul") for n in awq.sim_model.graph.node)


@pytest.mark.parametrize(("precision", "config", "match"), [
    ("int8", QuantConfig(awq=True), r"awq=True \(--awq\) scales weights for the weight-only precisions"),
    ("int4-wo", QuantConfig(smoothquant=0.5), r"smoothquant= \(--smoothquant\) moves activation outliers"),
    ("fp8", QuantConfig(calibrator="entropy"), r"^calibrator='entropy' fits INT8's .* with precision='fp8' "),
])
def test_options_the_precision_has_no_use_for_are_refused(mlp, precision, config, match):
    proto, x = mlp
    with pytest.raises(InvalidArgument, match=match):
        quantize_model(proto, x, config, progress=False, precision=precision)


@pytest.mark.parametrize("block", [0, 24, 8, True])
def test_block_size_is_checked(block):
    with pytest.raises(ConfigError, match="block_size"):
        QuantConfig(block_size=block)


def test_block_falls_back_to_a_divisor_of_k():
    spec = spec_of("int4-wo", QuantConfig(block_size=128))
    q = spec.weight_input((1, "w", 1), np.ones((192, 8), np.float32))
    assert q.block_size == 64 and q.scale_shape == (3, 8)
    assert "not a multiple of 16" in spec.weight_input((1, "w", 1), np.ones((20, 8), np.float32))


def _rtx_build(path, targets: tuple[str, ...]):
    """Build ``path`` for ``targets`` with TensorRT-RTX; (ok, error messages)."""
    mod = trt.bindings()

    class Logger(mod.ILogger):
        def __init__(self):
            super().__init__()
            self.errors = []

        def log(self, severity, msg):
            if severity <= mod.ILogger.Severity.ERROR:
                self.errors.append(msg)

    logger = Logger()
    builder = mod.Builder(logger)
    network = builder.create_network(trt.network_flags())
    parser = mod.OnnxParser(network, logger)
    assert parser.parse_from_file(str(path)), [str(parser.get_error(i)) for i in range(parser.num_errors)]
    config = builder.create_builder_config()
    profile = builder.create_optimization_profile()
    for i in range(network.num_inputs):
        tensor = network.get_input(i)
        shape = [2 if d < 0 else d for d in tensor.shape]
        profile.set_shape(tensor.name, shape, shape, shape)
    config.add_optimization_profile(profile)
    config.num_compute_capabilities = len(targets)
    for i, target in enumerate(targets):
        config.set_compute_capability(getattr(mod.ComputeCapability, target.upper()), i)
    plan = builder.build_serialized_network(network, config)
    return plan is not None, logger.errors


@pytest.mark.skipif(not trt.info().is_rtx, reason="TensorRT-RTX builds")
@pytest.mark.parametrize(("precision", "targets", "builds"), [
    ("fp8", ("sm89",), True), ("fp8", ("sm120",), True), ("fp8", ("sm86",), False),
    ("int8-wo", ("sm86", "sm89", "sm120"), True), ("int4-wo", ("sm86", "sm89", "sm120"), True),
])
def test_tensorrt_rtx_builds_the_graphs(mlp, tmp_path, precision, targets, builds):
    proto, x = mlp
    result = quantize_model(proto, x, QuantConfig(bias_correction=False), progress=False, precision=precision)
    path = tmp_path / f"{precision}.onnx"
    onnx.save(result.model, str(path))
    ok, errors = _rtx_build(path, targets)
    assert ok == builds, errors
    if not builds:  # FP8 is hardware-specific: sm86 has no FP8 units
        assert any("fp8" in e for e in errors), errors


@pytest.mark.skipif(not trt.info().is_rtx, reason="TensorRT-RTX builds")
def test_compile_builds_fp8_for_sm89_and_sm120(mlp, tmp_path):
    """trtforge.compile end to end: an FP8 engine for sm89 + sm120, and a sidecar that says what it is."""
    import trtforge

    proto, x = mlp
    path = tmp_path / "mlp.onnx"
    onnx.save(proto, str(path))
    art = trtforge.compile(path, precision="fp8", targets=["sm89", "sm120"], calibration_data=x,
                           output_dir=tmp_path / "out", progress=False, cache=False)
    sidecar = art.sidecar
    assert sidecar.precision.built == "fp8" and art.engine_path.stat().st_size > 0
    assert sidecar.quantization.precision == "fp8" and sidecar.quantization.coverage == 1.0
    assert sidecar.precision.node_dtypes.get("float8e4m3fn", 0) == 3  # one activation Q per layer input


@pytest.mark.parametrize(("flags", "match"), [
    (["--precision", "int8", "--awq"], "awq=True (--awq) scales weights for the weight-only precisions"),
    (["--precision", "int4-wo", "--smoothquant", "0.5"], "smoothquant= (--smoothquant) moves activation outliers"),
    (["--precision", "fp8", "--block-size", "64"], "block_size= (--block-size) is for int8-wo/int4-wo"),
    (["--precision", "int8", "--rounding", "gptq"], "rounding='gptq' (--rounding gptq) is for int8-wo/int4-wo, not int8: drop it"),
    (["--precision", "fp8", "--calibrator", "entropy"], "--calibrator entropy fits INT8's 128 uniform levels"),
    # auto may pick FP8 (the capability table decides per target), so it refuses entropy alike, in CLI terms
    (["--precision", "auto", "--error-budget", "0.1", "--calibrator", "entropy"],
     "--calibrator entropy fits INT8's 128 uniform levels and clips FP8 activations far too hard; with "
     "--precision fp8 or auto (which may pick FP8) use --calibrator mse (the default) or max"),
])
@pytest.mark.slow
def test_cli_refuses_options_the_precision_cannot_use(mlp, tmp_path, flags, match):
    import subprocess
    import sys

    proto, x = mlp
    onnx.save(proto, str(tmp_path / "mlp.onnx"))
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "trtforge.cli", "build", str(tmp_path / "mlp.onnx"), "--calib",
                           str(tmp_path / "x.npy"), "-o", str(out), "-q", *flags],
                          capture_output=True, text=True, timeout=300, check=False)
    text = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 2 and match in text and "Traceback" not in text, text
    assert not out.exists() or not any(out.rglob("*.engine"))


@pytest.mark.parametrize("precision", ["int8", "int8-wo"])
def test_nothing_to_quantize_names_the_fix_in_the_readers_terms(tmp_path, precision):
    """A graph with nothing the precision quantizes (a Conv-only net at int8-wo, as MobileNetV1; a Relu at int8) is
    refused in one line whose fix is spelled for the reader: ``--precision fp16`` in the CLI, ``precision='fp16'``
    in Python (the CLI said ``precision='fp16'``)."""
    from cli_in_process import run
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"])] if precision == "int8-wo" else \
        [helper.make_node("Relu", ["x"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4 if precision == "int8-wo" else 3,
                                                                                     6 if precision == "int8-wo" else 8,
                                                                                     6 if precision == "int8-wo" else 8])],
                              [weight] if precision == "int8-wo" else [])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "m.onnx")
    np.save(tmp_path / "x.npy", np.random.default_rng(0).standard_normal((4, 3, 8, 8)).astype(np.float32))
    calib = ["--calib", "x.npy", "--allow-unaccelerated"] if precision == "int8" else []
    done = run(["build", "m.onnx", "--precision", precision, *calib, "-q"], cwd=tmp_path)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2 and len(errors) == 1, done.stderr
    assert "to quantize; build it with --precision fp16 instead" in errors[0] and "precision='fp16'" not in errors[0]
    with pytest.raises(InvalidArgument, match=r"build it with precision='fp16' instead"):
        quantize_model(onnx.load(tmp_path / "m.onnx"), None if precision == "int8-wo" else
                       [np.load(tmp_path / "x.npy")], QuantConfig(), progress=False, precision=precision)
