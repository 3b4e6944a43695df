"""Cache keys: stable across processes, changed by every field that matters, not by those that don't."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from tiny_model import EXAMPLE_SHAPE, TinyNet

from trtforge.cache import engine_cache
from trtforge.cache.request_key import request_key
from trtforge.core import trt
from trtforge.core.batch import BatchProfile
from trtforge.core.config import ENGINE, GRAPH, NOT_IN_KEY, OUTPUT, CompileConfig, QuantConfig, options_of
from trtforge.core.postprocess import NMS
from trtforge.core.preprocessing import PreprocessConfig
from trtforge.pipeline import compile as compile_model

pytestmark = pytest.mark.needs_trt

DOUBLES = Path(__file__).resolve().parents[1] / "doubles"

KEYS_SCRIPT = """
import json, sys, torch
sys.path.insert(0, sys.argv[1])
from tiny_model import TinyNet, EXAMPLE_SHAPE
from trtforge.cache.engine_cache import engine_key
from trtforge.cache.request_key import request_key
from trtforge.core.config import CompileConfig
onnx_path = sys.argv[2]
cfg = CompileConfig(precision="fp16", batch="1:4:8", targets=["sm89"], name="tiny")
torch.manual_seed(0)
model = TinyNet().eval()
print(json.dumps({
    "onnx_request": request_key(onnx_path, None, cfg),
    "module_request": request_key(model, (torch.zeros(*EXAMPLE_SHAPE),), cfg),
    "engine": engine_key(open(onnx_path, "rb").read(), cfg, network_name="tiny_fp16"),
}))
"""


def _keys_here(onnx_path: Path) -> dict:
    cfg = CompileConfig(precision="fp16", batch="1:4:8", targets=["sm89"], name="tiny")
    torch.manual_seed(0)
    model = TinyNet().eval()
    return {
        "onnx_request": request_key(onnx_path, None, cfg),
        "module_request": request_key(model, (torch.zeros(*EXAMPLE_SHAPE),), cfg),
        "engine": engine_cache.engine_key(onnx_path.read_bytes(), cfg, network_name="tiny_fp16"),
    }


@pytest.mark.slow
def test_keys_are_the_same_in_another_process(tiny_onnx):
    out = subprocess.run([sys.executable, "-c", KEYS_SCRIPT, str(DOUBLES), str(tiny_onnx)], check=True,
                         capture_output=True, text=True)
    theirs = json.loads(out.stdout.strip().splitlines()[-1])
    assert theirs == _keys_here(tiny_onnx)
    assert len(set(theirs.values())) == 3


BASE = CompileConfig(precision="fp16", name="m")
#: One changed value per option that reaches the engine's bytes: each changes the engine key.
ENGINE_CHANGES: dict[str, object] = {
    "precision": "fp32",
    "path": "direct",
    "batch": (BatchProfile(1, 8, 32),),
    "batched_inputs": ("x",),
    "shapes": (("x", ((1, 3, 8, 8), (1, 3, 16, 16), (1, 3, 32, 32))),),
    "targets": ("sm89",),
    "optimization_level": 5,
    "workspace_bytes": 1 << 30,
    "hardware_compatibility": "ampere_plus",
    "version_compatible": True,
    "refittable": True,
    "strip_weights": True,
    "name": "other",
    "allow_unaccelerated": True,
}
#: Options that change the processed graph: the request key reads them (the engine key reads the graph).
GRAPH_CHANGES: dict[str, object] = {
    "input_names": ("images",),
    "output_names": ("logits",),
    "quant": QuantConfig(calibrator="entropy"),
    "keep_fp32": ("conv",),
    "layer_precision": {"conv": "fp32"},
    "dynamic_batch": True,
    "min_block_size": 2,
    "torch_executed_ops": ("aten.softmax",),
    "outputs": ("y",),
    "postprocess": NMS("yolo"),
}
#: Options that do not affect the engine: no key may read them.
NOT_AFFECTING: dict[str, object] = {
    "output_dir": Path("elsewhere"),
    "preprocessing": {"resize": [8, 8], "mean": [0.5, 0.5, 0.5]},
    "progress": False,
    "cache": False,
    "cache_dir": Path("/tmp/trtforge-other-cache"),
    "timing_cache": Path("/tmp/trtforge-timing.cache"),
    "notes": ("a note",),
    "overwrite": True,
    "strict_accuracy": True,
}


def test_every_config_field_is_covered_here():
    fields = {f.name for f in dataclasses.fields(CompileConfig)}
    assert fields == set(ENGINE_CHANGES) | set(GRAPH_CHANGES) | set(NOT_AFFECTING), \
        "a new CompileConfig field needs a key test"
    affects = dict((name, opt.affects) for name, opt in options_of(CompileConfig))
    assert {n for n, a in affects.items() if a == ENGINE} == set(ENGINE_CHANGES)
    assert {n for n, a in affects.items() if a == GRAPH} == set(GRAPH_CHANGES)
    assert {n for n, a in affects.items() if a == OUTPUT} == set(NOT_AFFECTING) == set(NOT_IN_KEY)


def _keys(config: CompileConfig, onnx_path: Path) -> tuple[str, str]:
    return (engine_cache.engine_key(b"graph", config, network_name="m_fp16"), request_key(onnx_path, None, config))


@pytest.mark.parametrize("field", sorted(ENGINE_CHANGES))
def test_each_engine_option_changes_the_engine_and_request_keys(field, tiny_onnx):
    engine, request = _keys(BASE, tiny_onnx)
    changed_engine, changed_request = _keys(dataclasses.replace(BASE, **{field: ENGINE_CHANGES[field]}), tiny_onnx)
    assert changed_engine != engine and changed_request != request


@pytest.mark.parametrize("field", sorted(GRAPH_CHANGES))
def test_each_graph_option_changes_the_request_key_only(field, tiny_onnx):
    base = dataclasses.replace(BASE, precision="int8") if field == "quant" else BASE
    engine, request = _keys(base, tiny_onnx)
    changed_engine, changed_request = _keys(dataclasses.replace(base, **{field: GRAPH_CHANGES[field]}), tiny_onnx)
    assert changed_request != request
    assert changed_engine == engine  # the engine key sees these through the processed graph's bytes


def test_equalize_changes_the_request_key_only(tiny_onnx):
    """Two INT8 configs that differ only in ``quant.equalize`` (a QuantConfig field: the request key reads it)."""
    on, off = (CompileConfig(precision="int8", name="m", quant=QuantConfig(equalize=value)) for value in (True, False))
    assert on.graph_fields()["quant"]["equalize"] is True
    assert request_key(tiny_onnx, None, on) != request_key(tiny_onnx, None, off)
    assert _keys(on, tiny_onnx)[0] == _keys(off, tiny_onnx)[0]  # the engine key reads the graph's bytes


@pytest.mark.parametrize("field", sorted(NOT_AFFECTING))
def test_options_that_do_not_affect_the_engine_change_no_key(field, tiny_onnx):
    changed = dataclasses.replace(BASE, **{field: NOT_AFFECTING[field]})
    assert _keys(changed, tiny_onnx) == _keys(BASE, tiny_onnx)


def test_graph_name_toolchain_change_the_key(monkeypatch):
    key = engine_cache.engine_key(b"graph", BASE, network_name="m_fp16")
    assert engine_cache.engine_key(b"graph2", BASE, network_name="m_fp16") != key
    assert engine_cache.engine_key(b"graph", BASE, network_name="n_fp16") != key
    monkeypatch.setattr(engine_cache, "__version__", "99.0")
    assert engine_cache.engine_key(b"graph", BASE, network_name="m_fp16") != key
    monkeypatch.undo()
    real = trt.info()
    other = dataclasses.replace(real, version="0.0.1")
    monkeypatch.setattr(engine_cache.trt, "info", lambda: other)
    assert engine_cache.engine_key(b"graph", BASE, network_name="m_fp16") != key
    other = dataclasses.replace(real, flavour="tensorrt")
    monkeypatch.setattr(engine_cache.trt, "info", lambda: other)
    assert engine_cache.engine_key(b"graph", BASE, network_name="m_fp16") != key


def test_timing_cache_path_does_not_change_the_key(tmp_path):
    with_cache = CompileConfig(precision="fp16", name="m", timing_cache=tmp_path / "t.cache")
    assert engine_cache.engine_key(b"g", with_cache, network_name="m") == engine_cache.engine_key(
        b"g", BASE, network_name="m")


def test_request_key_follows_weights_and_input_shapes(tiny_module):
    cfg = CompileConfig(name="t")
    x = (torch.zeros(*EXAMPLE_SHAPE),)
    key = request_key(tiny_module, x, cfg)
    assert request_key(tiny_module, x, cfg) == key
    assert request_key(tiny_module, (torch.zeros(1, 3, 32, 32),), cfg) != key
    assert request_key(tiny_module, x, dataclasses.replace(cfg, input_names=["images"])) != key
    with torch.no_grad():
        tiny_module.head.bias[0] += 1e-3
    assert request_key(tiny_module, x, cfg) != key


def test_output_dir_preprocessing_and_notes_do_not_change_the_key(tiny_onnx, tmp_path):
    first = compile_model(tiny_onnx, output_dir=tmp_path / "a", cache_dir=tmp_path / "cache", progress=False)
    second = compile_model(tiny_onnx, output_dir=tmp_path / "b", cache_dir=tmp_path / "cache", progress=False,
                           notes="second", preprocessing={"resize": [8, 8], "mean": [0.5, 0.5, 0.5]})
    assert first.sidecar.builder.cache == {"key": second.sidecar.builder.cache["key"], "hit": False}
    assert second.sidecar.builder.cache["hit"] is True
    assert second.sidecar.notes == ("second",) and second.sidecar.preprocessing == PreprocessConfig((8, 8), mean=(0.5, 0.5, 0.5))
    assert second.engine_path.read_bytes() == first.engine_path.read_bytes()
    third = compile_model(tiny_onnx, output_dir=tmp_path / "a", cache_dir=tmp_path / "cache", progress=False,
                          optimization_level=2, overwrite=True)  # another build of "tiny" in "a": replace it
    assert third.sidecar.builder.cache["hit"] is False
    assert third.sidecar.builder.cache["key"] != first.sidecar.builder.cache["key"]


def test_example_values_change_the_fp16_request_key_only():
    """The range probe reads the example inputs' values: FP16/BF16 graphs depend on them, FP32 ones do not."""
    model = TinyNet().eval()
    small, large = torch.zeros(*EXAMPLE_SHAPE), torch.full(EXAMPLE_SHAPE, 3e4)
    fp16, fp32 = CompileConfig(precision="fp16", name="t"), CompileConfig(precision="fp32", name="t")
    assert request_key(model, (small,), fp16) != request_key(model, (large,), fp16)
    assert request_key(model, (small,), fp32) == request_key(model, (large,), fp32)


def test_keep_fp32_and_layer_precision_fp32_are_one_request(tiny_onnx):
    """``--keep-fp32 X`` and ``--layer-precision X:fp32`` process the graph alike: one key. The build's own
    type as a layer precision changes nothing."""
    keep = _keys(dataclasses.replace(BASE, keep_fp32=("conv",)), tiny_onnx)
    assert _keys(dataclasses.replace(BASE, layer_precision=["conv:fp32"]), tiny_onnx) == keep
    assert _keys(dataclasses.replace(BASE, layer_precision={"conv": "fp16"}), tiny_onnx) == _keys(BASE, tiny_onnx)


def test_request_key_follows_external_data_files(tiny_onnx, tmp_path):
    """The ONNX file is parsed only when it can name external data; then every named file is hashed."""
    import onnx

    from trtforge.cache.request_key import onnx_fingerprint

    path = tmp_path / "ext.onnx"
    onnx.save_model(onnx.load(str(tiny_onnx)), str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="weights.bin", size_threshold=0)
    fingerprint = onnx_fingerprint(path)
    assert list(fingerprint["external"]) == ["weights.bin"]
    assert onnx_fingerprint(tiny_onnx)["external"] == {}
    key = request_key(path, None, BASE)
    data = bytearray((tmp_path / "weights.bin").read_bytes())
    data[0] ^= 0xFF
    (tmp_path / "weights.bin").write_bytes(bytes(data))
    assert request_key(path, None, BASE) != key and onnx_fingerprint(path)["onnx_sha256"] == fingerprint["onnx_sha256"]
