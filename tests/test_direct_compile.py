"""``trtforge.compile(..., path="direct")`` and ``trtforge build --path direct``: the direct path writes the
same artifact as the ONNX path (engine + typed sidecar, no ONNX), is cached under a key that reads the
converters' source hash, and refuses what it cannot take in one line."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from tiny_model import TinyNet
from typer.testing import CliRunner

import trtforge
from trtforge.cache.engine_cache import engine_key
from trtforge.cache.request_key import request_key
from trtforge.cli import app
from trtforge.convert import converters
from trtforge.convert.api import export_batch, lower_for_profiles
from trtforge.convert.evaluator import evaluate
from trtforge.core.batch import parse_batch
from trtforge.core.config import CompileConfig, ConfigError, QuantConfig
from trtforge.core.errors import InvalidArgument
from trtforge.core.sidecar import read_sidecar

pytestmark = pytest.mark.needs_trt


def _tiny() -> TinyNet:
    torch.manual_seed(0)
    return TinyNet().eval()


def _compile(tmp_path, **options):
    options = {"path": "direct", "output_dir": tmp_path / "out", "cache_dir": tmp_path / "cache", "progress": False,
               **options}
    return trtforge.compile(_tiny(), (torch.zeros(1, 3, 16, 16),), **options)


@pytest.mark.slow
def test_direct_compile_writes_engine_and_typed_sidecar_without_onnx(tmp_path):
    art = _compile(tmp_path, precision="fp16", batch="1:4:8", input_names=("images",), output_names=("logits",))
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["tiny_net_fp16.engine", "tiny_net_fp16.json"]
    assert art.onnx_path is None and art.reference_onnx_path is None
    sc = read_sidecar(art.sidecar_path)
    sc.verify_engine()
    assert sc.source.kind == "torch" and sc.source.path == "direct" and sc.source.module == "TinyNet"
    assert sc.source.onnx_file is None and sc.source.reference_onnx_file is None
    assert [(s.name, s.shape) for s in sc.inputs] == [("images", (-1, 3, 16, 16))]
    assert [(s.name, s.dtype, s.shape) for s in sc.outputs] == [("logits", "float32", (-1, 4))]
    assert sc.profiles[0]["images"] == {"min": [1, 3, 16, 16], "opt": [4, 3, 16, 16], "max": [8, 3, 16, 16]}
    assert sc.precision.requested == sc.precision.built == "fp16"
    # the FP32 rule set keeps a mean only where it feeds a normalisation (Sqrt/Reciprocal), as the ONNX path does
    assert "mean" not in sc.precision.fp32_nodes
    assert sc.builder.converter_hash == converters.source_hash() and sc.builder.config["path"] == "direct"
    assert sc.builder.flavour and sc.builder.build_seconds is not None
    assert any("no ONNX" in note for note in sc.notes)


@pytest.mark.slow
def test_a_static_batch_exports_static_at_that_batch(tmp_path):
    art = _compile(tmp_path, precision="fp32", batch=3)
    assert art.sidecar.inputs[0].shape == (3, 3, 16, 16) and art.sidecar.outputs[0].shape == (3, 4)


@pytest.mark.slow
def test_second_compile_hits_and_a_converter_change_misses(tmp_path, monkeypatch):
    first = _compile(tmp_path, precision="fp32")
    again = _compile(tmp_path, precision="fp32")
    assert again.sidecar.builder.cache == {"key": first.sidecar.builder.cache["key"], "hit": True}
    monkeypatch.setattr(converters, "source_hash", lambda: "f" * 64)  # as if a converter's source had changed
    changed = _compile(tmp_path, precision="fp32")
    assert changed.sidecar.builder.cache["hit"] is False
    assert changed.sidecar.builder.cache["key"] != first.sidecar.builder.cache["key"]
    assert changed.sidecar.builder.converter_hash == "f" * 64


def test_the_converter_hash_is_part_of_the_engine_and_request_keys():
    config = CompileConfig(path="direct", name="m")
    model, inputs = _tiny(), (torch.zeros(1, 3, 16, 16),)
    engine = [engine_key(b"net", config, network_name="m_fp16", converter_hash=h) for h in ("a" * 64, "b" * 64)]
    request = [request_key(model, inputs, config, converter_hash=h) for h in ("a" * 64, "b" * 64)]
    assert engine[0] != engine[1] and request[0] != request[1]


@pytest.mark.slow
def test_the_direct_lowering_matches_pytorch_at_other_batches():
    model = _tiny()
    lowered = lower_for_profiles(model, (torch.zeros(1, 3, 16, 16),), parse_batch("1:2:6"))
    for batch in (1, 5):
        x = torch.randn(batch, 3, 16, 16, generator=torch.Generator().manual_seed(batch))
        (out,) = evaluate(lowered.net.record, {"x": x})
        torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-5)
    assert export_batch(parse_batch("1:1:1,2:8:32")) == (1, 1, 32)


@pytest.mark.slow
def test_the_recorded_network_is_canonical_and_follows_the_weights():
    first = lower_for_profiles(_tiny(), (torch.zeros(2, 3, 16, 16),), parse_batch("1:2:4")).net.record
    second = lower_for_profiles(_tiny(), (torch.zeros(2, 3, 16, 16),), parse_batch("1:2:4")).net.record
    assert first.canonical() == second.canonical()
    other = _tiny()
    with torch.no_grad():
        other.head.bias += 1
    changed = lower_for_profiles(other, (torch.zeros(2, 3, 16, 16),), parse_batch("1:2:4")).net.record
    assert changed.canonical() != first.canonical()


@pytest.mark.slow
def test_onnxruntime_route_explains_the_direct_path_has_no_onnx(tmp_path):
    art = _compile(tmp_path, precision="fp32")
    with pytest.raises(InvalidArgument, match="direct path .*no ONNX graph for route 'onnxruntime'"):
        trtforge.load(art.sidecar_path, route="onnxruntime")


def test_direct_path_refuses_an_onnx_file_and_onnx_only_int8_options_in_one_line(tmp_path, tiny_onnx):
    with pytest.raises(ConfigError, match="path='direct' converts a PyTorch module"):
        trtforge.compile(tiny_onnx, path="direct", output_dir=tmp_path)
    with pytest.raises(ConfigError, match="placement='auto' .* is not on the direct path"):
        trtforge.compile(_tiny(), (torch.zeros(1, 3, 16, 16),), path="direct", precision="int8",
                         calibration_data=np.zeros((4, 3, 16, 16), np.float32), output_dir=tmp_path,
                         quant=QuantConfig(placement="auto"), allow_unaccelerated=True)
    with pytest.raises(ConfigError, match="smoothquant= .* is not on the direct path"):
        trtforge.compile(_tiny(), (torch.zeros(1, 3, 16, 16),), path="direct", precision="int8",
                         calibration_data=np.zeros((4, 3, 16, 16), np.float32), output_dir=tmp_path,
                         quant=QuantConfig(smoothquant=0.5), allow_unaccelerated=True)
    with pytest.raises(ConfigError, match="rounding='learned' .* is not on the direct path"):
        trtforge.compile(_tiny(), (torch.zeros(1, 3, 16, 16),), path="direct", precision="int8",
                         calibration_data=tmp_path / "never-read.npy", output_dir=tmp_path,
                         quant=QuantConfig(rounding="learned"), allow_unaccelerated=True)
    with pytest.raises(ConfigError, match="unknown path 'tflite'"):
        CompileConfig(path="tflite")


runner = CliRunner()


@pytest.mark.slow
def test_cli_build_path_direct_takes_a_module_factory(tmp_path):
    out = tmp_path / "out"
    result = runner.invoke(app, ["build", "tiny_model:TinyNet", "--path", "direct", "--input-shape", "1x3x16x16",
                                 "--batch", "1:2:4", "--precision", "fp32", "-o", str(out), "--quiet",
                                 "--cache-dir", str(tmp_path / "cache")])
    assert result.exit_code == 0, result.output
    data = json.loads((out / "tiny_net_fp32.json").read_text())
    assert data["source"] == {"kind": "torch", "module": "TinyNet", "factory": "tiny_model:TinyNet", "path": "direct"}
    assert data["profiles"][0]["x"]["max"] == [4, 3, 16, 16]


@pytest.mark.parametrize(("args", "line"), [
    (["model.onnx", "--path", "direct"], "convert a PyTorch model, not a file"),
    (["tiny_model:TinyNet", "--path", "direct"], "add --input-shape"),
    (["tiny_model:TinyNet", "--path", "direct", "--input-shape", "1x3xQ"], "positive sizes joined by x"),
    (["tiny_model", "--path", "direct", "--input-shape", "1x3"], "package.module:function"),
    (["tiny_model:Nope", "--path", "direct", "--input-shape", "1x3"], "cannot import factory"),
    (["model.onnx", "--input-shape", "1x3"], "--input-shape is for --path direct"),
])
def test_cli_build_path_direct_bad_input_is_one_line(tmp_path, args, line):
    result = runner.invoke(app, ["build", *args, "-o", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert line in result.output and "Traceback" not in result.output


@pytest.mark.slow
def test_direct_int8_calibrates_the_module_and_records_its_placement(tmp_path):
    calib = np.random.default_rng(0).standard_normal((12, 3, 16, 16)).astype(np.float32)
    # TensorRT-RTX runs no W8A8 INT8 (builder.capability): this tests the direct path's INT8 machinery.
    art = _compile(tmp_path, precision="int8", calibration_data=calib, batch=(1, 2, 4),
                   quant=QuantConfig(include=("conv",)), allow_unaccelerated=True)
    quant = art.sidecar.quantization
    assert art.engine_path.is_file() and art.sidecar.precision.built == "int8"
    # 20 % held back for the accuracy report, as on the ONNX path
    assert quant.int8_layers == 1 and quant.layers_total == 2 and quant.samples == {"calibration": 10, "held_back": 2}
    assert quant.excluded_layers == [{"layer": "head", "reason": "final head (no Conv/MatMul/Gemm after it)"}]
    assert any("direct-path INT8: 1 layer(s)" in note for note in art.sidecar.notes)
    assert read_sidecar(art.sidecar_path).unknown_keys() == []  # the INT8 report is typed, key for key
    plan = art.sidecar.target_plan  # TensorRT-RTX: the INT8 convolution runs as FP16 on every target
    assert [(layer["layer"], layer["op"], set(layer["runs_as"].values())) for layer in plan.layers] == [
        ("conv", "Conv", {"fp16"})]
    assert plan.unaccelerated == ("conv",) and plan.allow_unaccelerated
    default = _compile(tmp_path, precision="int8", calibration_data=calib, batch=(1, 2, 4), name="tiny_default",
                       allow_unaccelerated=True)
    assert default.sidecar.quantization.int8_layers == 0  # 3 input channels and the head: FP16 by the rules


@pytest.mark.slow
def test_one_config_builds_through_both_paths_with_the_one_builder(tmp_path):
    """Issue 23: the same ``CompileConfig`` object through the ONNX path and the direct path; both builds go
    through ``builder.build.build_network``, so profiles, targets, level and builder record agree."""
    config = CompileConfig(precision="fp16", batch="1:4:8", input_names=("images",), output_names=("logits",),
                           optimization_level=1, progress=False, cache_dir=tmp_path / "cache")
    model, x = _tiny(), (torch.zeros(1, 3, 16, 16),)
    via_onnx = trtforge.compile(model, x, config, path="onnx", output_dir=tmp_path / "onnx").sidecar
    direct = trtforge.compile(model, x, config, path="direct", output_dir=tmp_path / "direct").sidecar
    assert via_onnx.source.path != direct.source.path == "direct"
    assert via_onnx.profiles == direct.profiles and direct.profiles[0]["images"]["max"] == [8, 3, 16, 16]
    assert [s.as_dict() for s in via_onnx.inputs] == [s.as_dict() for s in direct.inputs]
    assert [s.as_dict() for s in via_onnx.outputs] == [s.as_dict() for s in direct.outputs]
    for field in ("flavour", "version", "targets", "optimization_level", "strongly_typed", "workspace_bytes"):
        assert getattr(via_onnx.builder, field) == getattr(direct.builder, field), field
    assert direct.builder.optimization_level == 1
    ours = {k: v for k, v in via_onnx.builder.config.items() if k != "path"}
    assert ours == {k: v for k, v in direct.builder.config.items() if k != "path"}
