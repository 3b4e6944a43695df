"""precision="auto" (issue 21 item 5): per layer the cheapest precision every target accelerates, within the
error budget, against ONNX Runtime run here and real TensorRT-RTX builds."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from typer.testing import CliRunner

from trtforge.builder.precision_plan import auto_ladder
from trtforge.cli import app
from trtforge.core import trt
from trtforge.core.config import CompileConfig, ConfigError, QuantConfig
from trtforge.quantize.auto_precision import graph_ladder, quantize_auto

HELD = 8  # of 40 samples, holdout 0.2: the last 8 are held back


class Net(torch.nn.Module):
    """Two 3x3 convolutions (32 channels) and a two-layer MLP head (Gemm)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 32, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(32, 32, 3, padding=1)
        self.fc1 = torch.nn.Linear(32, 64)
        self.fc2 = torch.nn.Linear(64, 16)

    def forward(self, x):
        y = torch.relu(self.conv2(torch.relu(self.conv(x)))).mean((2, 3))
        return self.fc2(torch.relu(self.fc1(y)))


@pytest.fixture(scope="module")
def net(tmp_path_factory):
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("net") / "net.onnx"
    torch.onnx.export(Net().eval(), (torch.randn(1, 3, 16, 16),), str(path), input_names=["x"], output_names=["y"],
                      dynamo=False, opset_version=19, dynamic_axes={"x": {0: "b"}, "y": {0: "b"}})
    x = np.random.default_rng(0).standard_normal((40, 3, 16, 16)).astype(np.float32)
    return path, x


def _session(proto: onnx.ModelProto) -> ort.InferenceSession:
    """A plain ONNX Runtime session, every graph rewrite off (the reference, independent of trtforge's own)."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])


def _run(model, x: np.ndarray) -> np.ndarray:
    proto = model if isinstance(model, onnx.ModelProto) else onnx.load(str(model))
    feed = x.astype(np.float16) if proto.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT16 else x
    return np.asarray(_session(proto).run(None, {"x": feed})[0], np.float32)


def _rel_l2(ref: np.ndarray, test: np.ndarray) -> float:
    """Mean over samples of ||test - ref|| / ||ref|| (what the budget's rel_l2 is)."""
    ref, test = ref.reshape(len(ref), -1).astype(np.float64), test.reshape(len(test), -1).astype(np.float64)
    return float(np.mean(np.linalg.norm(test - ref, axis=1) / np.linalg.norm(ref, axis=1)))


def _choices(result) -> dict[str, str]:
    return {row["layer"]: row["precision"] for row in result.report["auto_precision"]["layers"]}


def _ladder(targets):
    return auto_ladder(CompileConfig(precision="auto", targets=targets, quant=QuantConfig(error_budget=0.1)))


FP8_TARGETS = ("sm89", "sm120")
QUIET = QuantConfig(error_budget=0.5, task="other", bias_correction=False)


def test_the_ladder_follows_the_capability_table():
    """(c) TensorRT-RTX's default targets: no W8A8 INT8 (and no FP8: sm86); GEMMs weight-only. sm89+sm120: FP8."""
    assert trt.info().is_rtx
    default = _ladder(())
    assert all("int8" not in rungs and "fp8" not in rungs for rungs in default.values()), default
    assert default["MatMul"] == default["Gemm"] == ("int8-wo",)
    fp8 = _ladder(FP8_TARGETS)
    assert fp8["MatMul"][0] == fp8["Gemm"][0] == "fp8" and "int8" not in fp8["MatMul"], fp8
    # one W8A8 type per graph, in ladder order
    assert graph_ladder({"Conv": ("int8",), "MatMul": ("int8-wo", "int8", "fp8")}) == {"Conv": (), "MatMul": ("fp8", "int8-wo")}


def test_a_probe_build_that_refuses_takes_the_precision_off_the_ladder():
    """A build tells more than the table: a probe refusing FP8 on one target leaves FP8 off every op's ladder."""
    config = CompileConfig(precision="auto", targets=FP8_TARGETS, quant=QuantConfig(error_budget=0.1))
    asked = []

    def probe(op_class: str, scheme: str, target: str) -> str | None:
        asked.append((op_class, scheme, target))
        return "Cannot compile for target(s) sm120" if (scheme, target) == ("fp8", "sm120") else None

    ladder = auto_ladder(config, probe)
    assert all("fp8" not in rungs for rungs in ladder.values()) and ladder["MatMul"] == ("int8-wo",), ladder
    assert ("gemm", "fp8", "sm120") in asked


@pytest.mark.parametrize("targets", [(), FP8_TARGETS], ids=["rtx-default", "sm89-sm120"])
def test_a_loose_budget_gives_every_layer_its_cheapest_accelerated_precision(net, targets):
    """(a) Each layer gets the first precision of its op's ladder that the quantizer can give it, else FP16."""
    path, x = net
    ladder = _ladder(targets)
    result = quantize_auto(onnx.load(str(path)), x, QUIET, ladder, progress=False)
    expected = {"conv": "fp8" if targets else "fp16", "conv2": "fp8" if targets else "fp16",
                "fc1": ladder["Gemm"][0], "fc2": ladder["Gemm"][0]}
    assert _choices(result) == expected
    assert all(row["precision"] == row["cheapest"] for row in result.report["auto_precision"]["layers"])
    if not targets:  # RTX default: no layer carries W8A8 INT8 (nor FP8) Q/DQ
        dtypes = {t.data_type for t in result.model.graph.initializer if t.name.endswith("_zp")}
        assert dtypes == {onnx.TensorProto.INT8} and not any(n.op_type == "QuantizeLinear" for n in result.model.graph.node)


def test_a_tight_budget_moves_the_sensitive_layers_up_and_holds_on_the_held_back_samples(net):
    """(b) Everything at its cheapest rung misses the budget (ONNX Runtime says so); auto moves layers up the
    ladder, and the held-back error it reports is what ONNX Runtime measures on its simulation graph."""
    path, x = net
    ladder, proto = _ladder(FP8_TARGETS), onnx.load(str(path))
    held, ref = x[-HELD:], _run(proto, x[-HELD:])
    cheapest = quantize_auto(proto, x, QUIET, ladder, progress=False)
    budget = 0.6 * _rel_l2(ref, _run(cheapest.sim_model, held))
    tight = QuantConfig(error_budget=budget, task="other", bias_correction=False)
    result = quantize_auto(proto, x, tight, ladder, progress=False)
    choices = _choices(result)
    assert set(choices.values()) - {"fp8"}, choices  # something moved up
    assert any(p != "fp16" for p in choices.values()), choices  # and something stayed quantized
    measured = _rel_l2(ref, _run(result.sim_model, held))
    limit = result.report["error_budget"]["limits"][0]
    assert limit["holds"] and limit["measured"] == pytest.approx(measured, rel=1e-3, abs=1e-6) and measured <= budget
    # each layer's Q/DQ is the precision the report names
    kinds = {layer.label: {q.dtype for q in layer.inputs} for layer in result.plan.layers}
    for label, precision in choices.items():
        assert (label in kinds) == (precision != "fp16")
        if precision == "int8-wo":
            assert kinds[label] == {"int8"} and all(q.is_weight for q in next(
                layer for layer in result.plan.layers if layer.label == label).inputs)


@pytest.mark.slow
@pytest.mark.skipif(not trt.info().is_rtx, reason="TensorRT-RTX builds")
@pytest.mark.parametrize("targets", [(), FP8_TARGETS], ids=["rtx-default", "sm89-sm120"])
def test_compile_auto_builds_for_its_targets_and_writes_what_it_measured(net, tmp_path, targets):
    """(b, c, d) A real TensorRT-RTX build; the sidecar's target_plan says each quantized layer runs accelerated
    on every target, and the written FP16 graph, run in ONNX Runtime, stays near the reported held-back error."""
    import trtforge

    path, x = net
    art = trtforge.compile(path, precision="auto", targets=list(targets), calibration_data=x,
                           output_dir=tmp_path / "out", progress=False, cache=False,
                           quant=QuantConfig(error_budget=0.012, task="other", bias_correction=False))
    sc = art.sidecar
    assert sc.precision.requested == "auto" and art.engine_path.stat().st_size > 0
    choices = {row["layer"]: row["precision"] for row in sc.quantization.auto_precision["layers"]}
    plan = sc.target_plan.to_dict()
    schemes = {row["quantized_as"] for row in plan["layers"]}
    assert "int8" not in schemes and not plan["unaccelerated"]
    assert all(r == row["quantized_as"] for row in plan["layers"] for r in row["runs_as"].values())
    if targets:
        assert "fp8" in choices.values() and sc.precision.built == "fp8"
    else:
        assert "fp8" not in schemes and set(choices.values()) <= {"int8-wo", "fp16"}
    counts = sc.quantization.auto_precision["counts"]
    shown = CliRunner().invoke(app, ["inspect", str(art.sidecar_path)])
    assert shown.exit_code == 0 and ", ".join(f"{p}: {n}" for p, n in counts.items()) in shown.output, shown.output
    limit = sc.quantization.error_budget["limits"][0]
    written = _rel_l2(_run(art.reference_onnx_path, x[-HELD:]), _run(art.onnx_path, x[-HELD:]))
    assert limit["holds"] and written == pytest.approx(limit["measured"], abs=2e-3)


@pytest.mark.parametrize(("flags", "match"), [
    (["--error-budget", "0.1"], "--precision auto needs --calib DATA"),
    (["--calib", "CALIB"], "give error_budget= (--error-budget)"),
])
@pytest.mark.slow
def test_cli_refuses_auto_without_calibration_data_or_a_budget(net, tmp_path, flags, match):
    """(e) One line, exit 2, nothing written (the command in process: tests/support/cli_in_process.py)."""
    from cli_in_process import run

    path, x = net
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "out"
    flags = [str(tmp_path / "x.npy") if f == "CALIB" else f for f in flags]
    done = run(["build", path, "--precision", "auto", "-o", out, "-q", *flags])
    text = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == 2 and match in text and "Traceback" not in text, text
    assert not out.exists() or not any(out.iterdir())


def test_python_refuses_auto_without_a_budget_and_on_the_direct_path(tmp_path):
    import trtforge

    with pytest.raises(ConfigError, match="precision='auto'.*error_budget="):
        CompileConfig(precision="auto")
    with pytest.raises(ConfigError, match="precision='auto' is on the ONNX path only"):
        trtforge.compile(torch.nn.Linear(8, 8), (torch.zeros(1, 8),), path="direct", precision="auto",
                         calibration_data=np.zeros((8, 8), np.float32), output_dir=tmp_path,
                         quant=QuantConfig(error_budget=0.1))
    with pytest.raises(ConfigError, match="smoothquant="):
        CompileConfig(precision="auto", quant=QuantConfig(error_budget=0.1, smoothquant=0.5))
    # auto may pick FP8, so entropy (refused with fp8) is refused with auto too, in Python terms
    with pytest.raises(ConfigError, match=r"^calibrator='entropy' fits INT8's .* with precision='fp8' or 'auto' "
                                          r"\(which may pick FP8\) use calibrator='mse' \(the default\) or 'max'$"):
        CompileConfig(precision="auto", quant=QuantConfig(error_budget=0.1, calibrator="entropy"))
    config = CompileConfig(precision="auto", quant=QuantConfig(error_budget=0.1))
    assert config.float_dtype == "float16" and "fp8" in config.possible_precisions


@pytest.mark.slow
@pytest.mark.skipif(not trt.info().is_rtx, reason="TensorRT-RTX builds")
def test_minilm_mixes_fp8_weight_only_and_fp16_within_a_tight_budget_and_builds(minilm_onnx, minilm, tmp_path):
    """A real encoder for sm89+sm120 at cosine >= 0.9995: FP8, int8-wo and FP16 layers in one graph, the
    held-back cosine as ONNX Runtime measures it, and TensorRT-RTX builds the graph for both targets."""
    from test_precisions import _rtx_build

    from trtforge.zoo.texts import sentences

    _, tokenize = minilm
    feeds = [{k: v.numpy() for k, v in tokenize(sentences(8, offset=i), seq_len=32).items()} for i in range(0, 40, 8)]
    proto = onnx.load(str(minilm_onnx))
    result = quantize_auto(proto, feeds, QuantConfig(error_budget=0.9995, bias_correction=False),
                           _ladder(FP8_TARGETS), progress=False)
    counts = result.report["auto_precision"]["counts"]
    assert result.report["task"] == "embedding" and set(counts) == {"fp8", "int8-wo", "fp16"}, counts

    def outputs(model) -> np.ndarray:
        return np.concatenate([np.asarray(o, np.float64).reshape(8, -1) for o in _session(model).run(None, feeds[-1])],
                              axis=1)

    ref, sim = outputs(proto), outputs(result.sim_model)
    cosine = float(np.mean(np.sum(ref * sim, 1) / np.linalg.norm(ref, axis=1) / np.linalg.norm(sim, axis=1)))
    limit = result.report["error_budget"]["limits"][0]
    assert limit["holds"] and cosine >= 0.9995 and limit["measured"] == pytest.approx(cosine, abs=1e-6)
    path = tmp_path / "minilm_auto.onnx"
    onnx.save(result.model, str(path))
    ok, errors = _rtx_build(path, FP8_TARGETS)
    assert ok, errors
