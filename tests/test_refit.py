"""Refit: names and shapes checked before TensorRT, in-place atomic update of engine and sidecar.

The refit itself runs through ``FakeTrtRefitter`` (no engine can be deserialized here); every
TensorRT name the refit code uses is checked against the installed bindings.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest
import torch
from onnx import numpy_helper
from refit_double import DOUBLE_CLASSES, FakeTrtEngine, FakeTrtRefitter, fake_trt_refit_bindings
from tiny_model import TinyNet, export_tiny
from typer.testing import CliRunner

import trtforge.pipeline as pipeline
from trtforge import refit
from trtforge.cli import app
from trtforge.core import trt
from trtforge.core.sidecar import read_sidecar, write_sidecar
from trtforge.refit import TRT_API_USED, RefitError, refit_engine

pytestmark = [pytest.mark.needs_trt, pytest.mark.usefixtures("private_engine_cache")]


def _initializers(path):
    return {i.name: numpy_helper.to_array(i) for i in onnx.load(str(path)).graph.initializer
            if numpy_helper.to_array(i).dtype.kind == "f"}


@pytest.fixture
def refittable_artifact(tiny_onnx, tmp_path):
    """A real FP16 build whose sidecar says refittable (RTX builds refittable engines only on a GPU)."""
    art = pipeline.compile(tiny_onnx, output_dir=tmp_path / "out", cache=False, progress=False)
    sc = read_sidecar(art.sidecar_path)
    write_sidecar(art.sidecar_path, dataclasses.replace(sc, builder=dataclasses.replace(sc.builder, refittable=True)))
    return art


def _bindings(art, **kw):
    return fake_trt_refit_bindings(_initializers(art.onnx_path), **kw)


def test_refit_from_new_onnx_updates_engine_and_sidecar(refittable_artifact, tmp_path):
    art = refittable_artifact
    new_onnx = export_tiny(tmp_path / "finetuned.onnx", seed=1)
    old_sha = read_sidecar(art.sidecar_path).engine_sha256
    report = refit_engine(art.engine_path, new_onnx, bindings=_bindings(art))
    # The values handed to TensorRT are the new model's weights after the build's passes (FP16).
    reference = pipeline.compile(new_onnx, output_dir=tmp_path / "ref", name="tiny", cache=False, progress=False)
    expected = _initializers(reference.onnx_path)
    received = FakeTrtRefitter.last.pending
    assert sorted(received) == sorted(expected) == ["conv.bias", "conv.weight", "head.bias", "head.weight"]
    for name, value in expected.items():
        assert received[name].dtype == np.float16
        np.testing.assert_array_equal(received[name], value)
    sc = read_sidecar(art.sidecar_path)
    sc.verify_engine()  # the sidecar carries the new sha256
    assert sc.engine_sha256 == report.new_sha256 != old_sha
    assert sc.builder.refit["weights"] == "finetuned.onnx" and sc.builder.refit["previous_engine_sha256"] == old_sha
    assert art.engine_path.read_bytes() == FakeTrtEngine(expected, True, False).serialize()


def test_refit_from_state_dict(refittable_artifact, tmp_path):
    torch.manual_seed(1)
    state = TinyNet().state_dict()
    torch.save(state, tmp_path / "new.pt")
    refit_engine(refittable_artifact.engine_path, tmp_path / "new.pt", bindings=_bindings(refittable_artifact))
    received = FakeTrtRefitter.last.pending
    for name, tensor in state.items():
        np.testing.assert_array_equal(received[name], tensor.numpy().astype(np.float16))
    read_sidecar(refittable_artifact.sidecar_path).verify_engine()


def test_state_dict_with_other_names_is_refused_naming_them(refittable_artifact, tmp_path):
    before = refittable_artifact.engine_path.read_bytes()
    state = TinyNet().state_dict()
    state["conv2.weight"] = state.pop("conv.weight")
    torch.save(state, tmp_path / "renamed.pt")
    with pytest.raises(RefitError, match=r"missing \['conv.weight'\].*unknown to the engine \['conv2.weight'\]"):
        refit_engine(refittable_artifact.engine_path, tmp_path / "renamed.pt",
                     bindings=_bindings(refittable_artifact))
    assert refittable_artifact.engine_path.read_bytes() == before


class WiderNet(TinyNet):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.head = torch.nn.Linear(16, 4)


def test_other_shapes_are_refused_naming_the_first(refittable_artifact, tmp_path):
    torch.save(WiderNet().state_dict(), tmp_path / "wide.pt")
    with pytest.raises(RefitError, match=r"'conv.weight' has shape \[16, 3, 3, 3\], the engine's is \[8, 3, 3, 3\]"):
        refit_engine(refittable_artifact.engine_path, tmp_path / "wide.pt", bindings=_bindings(refittable_artifact))
    torch.onnx.export(WiderNet().eval(), (torch.zeros(1, 3, 16, 16),), str(tmp_path / "wide.onnx"), dynamo=False,
                      input_names=["x"], output_names=["y"], dynamic_axes={"x": {0: "b"}, "y": {0: "b"}})
    with pytest.raises(RefitError, match="new ONNX.*'conv.weight' has shape"):
        refit_engine(refittable_artifact.engine_path, tmp_path / "wide.onnx", bindings=_bindings(refittable_artifact))


def test_engine_not_built_refittable_is_refused(tiny_onnx, tmp_path):
    art = pipeline.compile(tiny_onnx, output_dir=tmp_path, cache=False, progress=False)
    torch.save(TinyNet().state_dict(), tmp_path / "new.pt")
    with pytest.raises(RefitError, match="refittable=True"):
        refit_engine(art.engine_path, tmp_path / "new.pt", bindings=_bindings(art))
    result = CliRunner().invoke(app, ["refit", str(art.engine_path), "--weights", str(tmp_path / "new.pt")])
    assert result.exit_code == 2 and "refittable=True" in result.output


def test_failed_refit_leaves_engine_and_sidecar_untouched(refittable_artifact, tmp_path, monkeypatch):
    torch.save(TinyNet().state_dict(), tmp_path / "new.pt")
    engine_before = refittable_artifact.engine_path.read_bytes()
    sidecar_before = refittable_artifact.sidecar_path.read_bytes()
    monkeypatch.setattr(FakeTrtRefitter, "fail_refit", True)
    with pytest.raises(RefitError, match="refit_cuda_engine failed"):
        refit_engine(refittable_artifact.engine_path, tmp_path / "new.pt", bindings=_bindings(refittable_artifact))
    assert refittable_artifact.engine_path.read_bytes() == engine_before
    assert refittable_artifact.sidecar_path.read_bytes() == sidecar_before


def test_stripped_engine_is_written_back_with_its_weights(refittable_artifact, tmp_path):
    art = refittable_artifact
    sc = read_sidecar(art.sidecar_path)
    write_sidecar(art.sidecar_path, dataclasses.replace(sc, builder=dataclasses.replace(sc.builder, refittable=False,
                                                                                    weights_stripped=True)))
    torch.manual_seed(1)
    torch.save(TinyNet().state_dict(), tmp_path / "new.pt")
    refit_engine(art.engine_path, tmp_path / "new.pt", bindings=_bindings(art, stripped=True))
    assert b"conv.weight float16" in art.engine_path.read_bytes()
    assert read_sidecar(art.sidecar_path).builder.weights_stripped is False


@pytest.mark.parametrize("name", TRT_API_USED)
def test_refit_attribute_exists_on_installed_bindings(name):
    if trt.missing([name]):
        pytest.fail(f"{trt.info().flavour} {trt.info().version} has no {name}, which trtforge refit uses")


@pytest.mark.parametrize("name", [n for n in TRT_API_USED if "." in n and n.split(".")[0] in DOUBLE_CLASSES])
def test_double_covers_the_same_surface(name):
    cls, attr = name.split(".")
    double = DOUBLE_CLASSES[cls]
    assert hasattr(double, attr) or attr in double.__init__.__code__.co_names, f"{double.__name__} lacks {attr}"


def test_refit_module_uses_only_listed_names():
    # Every "trt.X" the refit code touches is listed, so the surface test above is complete.
    import inspect
    import re

    source = inspect.getsource(refit)
    used = set(re.findall(r"\btrt\.([A-Z]\w*(?:\.[A-Z_]+)?)", source))
    assert used <= set(TRT_API_USED), used - set(TRT_API_USED)
