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

from trtforge.builder.config import NOT_IN_KEY, BuildConfig
from trtforge.builder.profiles import BatchProfile
from trtforge.cache import engine_cache
from trtforge.cache.request_key import request_key
from trtforge.core import trt
from trtforge.pipeline import compile as compile_model

pytestmark = pytest.mark.needs_trt

HERE = Path(__file__).parent

KEYS_SCRIPT = """
import json, sys, torch
sys.path.insert(0, sys.argv[1])
from tiny_model import TinyNet, EXAMPLE_SHAPE
from trtforge.builder.config import BuildConfig
from trtforge.cache.engine_cache import engine_key
from trtforge.cache.request_key import request_key
onnx_path = sys.argv[2]
cfg = BuildConfig.create(precision="fp16", batch="1:4:8", targets=["sm89"])
torch.manual_seed(0)
model = TinyNet().eval()
print(json.dumps({
    "onnx_request": request_key(onnx_path, None, cfg, name="tiny", input_names=None, output_names=None),
    "module_request": request_key(model, (torch.zeros(*EXAMPLE_SHAPE),), cfg, name="tiny", input_names=None,
                                  output_names=None),
    "engine": engine_key(open(onnx_path, "rb").read(), cfg, network_name="tiny_fp16"),
}))
"""


def _keys_here(onnx_path: Path) -> dict:
    cfg = BuildConfig.create(precision="fp16", batch="1:4:8", targets=["sm89"])
    torch.manual_seed(0)
    model = TinyNet().eval()
    return {
        "onnx_request": request_key(onnx_path, None, cfg, name="tiny", input_names=None, output_names=None),
        "module_request": request_key(model, (torch.zeros(*EXAMPLE_SHAPE),), cfg, name="tiny", input_names=None,
                                      output_names=None),
        "engine": engine_cache.engine_key(onnx_path.read_bytes(), cfg, network_name="tiny_fp16"),
    }


def test_keys_are_the_same_in_another_process(tiny_onnx):
    out = subprocess.run([sys.executable, "-c", KEYS_SCRIPT, str(HERE), str(tiny_onnx)], check=True,
                         capture_output=True, text=True)
    theirs = json.loads(out.stdout.strip().splitlines()[-1])
    assert theirs == _keys_here(tiny_onnx)
    assert len(set(theirs.values())) == 3


BASE = BuildConfig.create(precision="fp16")
#: One changed value per config field that reaches the engine's bytes.
CHANGED: dict[str, object] = {
    "precision": "fp32",
    "batches": (BatchProfile(1, 8, 32),),
    "shapes": (("x", ((1, 3, 8, 8), (1, 3, 16, 16), (1, 3, 32, 32))),),
    "targets": ("sm89",),
    "optimization_level": 5,
    "workspace_bytes": 1 << 30,
    "hardware_compatibility": "ampere_plus",
    "version_compatible": True,
    "refittable": True,
    "strip_weights": True,
}


def test_every_config_field_is_covered_here():
    fields = {f.name for f in dataclasses.fields(BuildConfig)}
    assert fields - set(NOT_IN_KEY) == set(CHANGED), "a new BuildConfig field needs a key test"


@pytest.mark.parametrize("field", sorted(CHANGED))
def test_each_config_field_changes_the_engine_key(field):
    key = engine_cache.engine_key(b"graph", BASE, network_name="m_fp16")
    changed = dataclasses.replace(BASE, **{field: CHANGED[field]})
    assert engine_cache.engine_key(b"graph", changed, network_name="m_fp16") != key


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
    with_cache = BuildConfig.create(precision="fp16", timing_cache=tmp_path / "t.cache")
    assert engine_cache.engine_key(b"g", with_cache, network_name="m") == engine_cache.engine_key(
        b"g", BASE, network_name="m")


def test_request_key_follows_weights_and_input_shapes(tiny_module):
    cfg = BuildConfig.create()
    x = (torch.zeros(*EXAMPLE_SHAPE),)
    key = request_key(tiny_module, x, cfg, name="t", input_names=None, output_names=None)
    assert request_key(tiny_module, x, cfg, name="t", input_names=None, output_names=None) == key
    assert request_key(tiny_module, (torch.zeros(1, 3, 32, 32),), cfg, name="t", input_names=None,
                       output_names=None) != key
    assert request_key(tiny_module, x, cfg, name="t", input_names=["images"], output_names=None) != key
    with torch.no_grad():
        tiny_module.head.bias[0] += 1e-3
    assert request_key(tiny_module, x, cfg, name="t", input_names=None, output_names=None) != key


def test_output_dir_preprocessing_and_notes_do_not_change_the_key(tiny_onnx, tmp_path):
    first = compile_model(tiny_onnx, output_dir=tmp_path / "a", cache_dir=tmp_path / "cache", progress=False)
    second = compile_model(tiny_onnx, output_dir=tmp_path / "b", cache_dir=tmp_path / "cache", progress=False,
                           notes="second", preprocessing={"mean": [0.5]})
    assert first.sidecar.builder.cache == {"key": second.sidecar.builder.cache["key"], "hit": False}
    assert second.sidecar.builder.cache["hit"] is True
    assert second.sidecar.notes == ("second",) and second.sidecar.preprocessing == {"mean": [0.5]}
    assert second.engine_path.read_bytes() == first.engine_path.read_bytes()
    third = compile_model(tiny_onnx, output_dir=tmp_path / "a", cache_dir=tmp_path / "cache", progress=False,
                          optimization_level=2)
    assert third.sidecar.builder.cache["hit"] is False
    assert third.sidecar.builder.cache["key"] != first.sidecar.builder.cache["key"]
