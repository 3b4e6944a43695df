"""Portability: file-name suffixes, multi-target builds with sizes, refusals before work, host code."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import trtforge.pipeline as pipeline
import trtforge.pipeline.onnx_path as onnx_path
from trtforge.builder import build, portability, timing_cache
from trtforge.capture.export import export_onnx
from trtforge.core import machine, trt
from trtforge.core.config import CompileConfig, ConfigError
from trtforge.core.sidecar import read_sidecar, write_sidecar

pytestmark = pytest.mark.needs_trt

BASE = CompileConfig(precision="fp16")


@pytest.mark.parametrize(("changes", "suffix"), [
    ({}, ""),
    ({"targets": ("sm89",)}, "_sm89"),
    ({"targets": ("sm80", "sm86", "sm89", "sm120")}, "_sm80_sm86_sm89_sm120"),
    ({"hardware_compatibility": "ampere_plus"}, "_ampere_plus"),
    ({"hardware_compatibility": "same_compute_capability"}, "_same_compute_capability"),
    ({"version_compatible": True}, "_version_compatible"),
    ({"refittable": True}, "_refittable"),
    ({"strip_weights": True}, "_stripped"),
    ({"refittable": True, "strip_weights": True, "version_compatible": True},
     "_version_compatible_refittable_stripped"),
])
def test_each_option_has_its_own_file_suffix(changes, suffix, tmp_path):
    cfg = dataclasses.replace(BASE, **changes)
    assert portability.file_suffix(cfg) == suffix
    paths = pipeline.OutputPaths(tmp_path, "m", "fp16", suffix)
    assert paths.engine().name == f"m_fp16{suffix}.engine" and paths.sidecar().name == f"m_fp16{suffix}.json"


@pytest.mark.slow
def test_build_matrix_one_engine_per_target_and_one_multi_target(tiny_onnx, tmp_path):
    default = pipeline.compile(tiny_onnx, output_dir=tmp_path, cache_dir=tmp_path / "cache", progress=False)
    default_bytes = default.engine_path.read_bytes()
    targets = ["sm80", "sm86", "sm89", "sm120"]
    arts = pipeline.build_matrix(tiny_onnx, targets=targets, output_dir=tmp_path, cache_dir=tmp_path / "cache",
                                 progress=False)
    names = [a.engine_path.name for a in arts]
    assert names == [f"tiny_fp16_{t}.engine" for t in targets] + ["tiny_fp16_sm80_sm86_sm89_sm120.engine"]
    assert default.engine_path.read_bytes() == default_bytes  # the default engine was not overwritten
    for art, expected in zip(arts, [[t] for t in targets] + [targets], strict=True):
        sc = read_sidecar(art.sidecar_path)
        sc.verify_engine()
        assert sc.builder.targets == tuple(expected)
        assert sc.engine_size == art.engine_path.stat().st_size > 0
    assert len({a.engine_path.read_bytes() for a in arts}) == 5


@pytest.mark.slow
def test_build_matrix_exports_a_module_once(tiny_module, tmp_path, monkeypatch):
    """The export does not depend on the target: one export serves every engine of the matrix (was one per engine)."""
    import torch
    from tiny_model import EXAMPLE_SHAPE

    exported = []

    def counted(*args, **kwargs):
        exported.append(args[2])
        return export_onnx(*args, **kwargs)

    monkeypatch.setattr(onnx_path, "export_onnx", counted)
    arts = pipeline.build_matrix(tiny_module, (torch.zeros(*EXAMPLE_SHAPE),), targets=["sm86", "sm89"],
                                 output_dir=tmp_path, cache=False, progress=False)
    assert [a.engine_path.name for a in arts] == ["tiny_net_fp16_sm86.engine", "tiny_net_fp16_sm89.engine",
                                                  "tiny_net_fp16_sm86_sm89.engine"]
    assert len(exported) == 1
    sidecars = [read_sidecar(a.sidecar_path) for a in arts]
    assert [sc.builder.targets for sc in sidecars] == [("sm86",), ("sm89",), ("sm86", "sm89")]
    assert {sc.source.kind for sc in sidecars} == {"torch"}
    assert len({sc.source.reference_onnx_sha256 for sc in sidecars}) == 1
    pipeline.compile(tiny_module, (torch.zeros(*EXAMPLE_SHAPE),), output_dir=tmp_path, cache=False, progress=False)
    assert len(exported) == 2  # outside build_matrix, every compile exports


@pytest.mark.slow
def test_cli_matrix_prints_one_row_per_engine(tiny_onnx, tmp_path):
    """The matrix's table is the CLI's: ``trtforge build --target ... --matrix`` builds and compares them."""
    from typer.testing import CliRunner

    from trtforge.cli import app

    runner = CliRunner()
    argv = ["build", str(tiny_onnx), "-o", str(tmp_path), "--cache-dir", str(tmp_path / "cache"), "-q"]
    refused = runner.invoke(app, [*argv, "--matrix"])
    assert refused.exit_code == 2 and "--matrix builds one engine per --target" in refused.output
    result = runner.invoke(app, [*argv, "--target", "sm86", "--target", "sm89", "--matrix"], terminal_width=200)
    assert result.exit_code == 0, result.output
    for name in ("tiny_fp16_sm86.engine", "tiny_fp16_sm89.engine", "tiny_fp16_sm86_sm89.engine"):
        size = (tmp_path / name).stat().st_size
        assert name in result.output and f"{size:,}" in result.output


def test_build_matrix_refuses_an_unknown_target_before_building(tiny_onnx, tmp_path, monkeypatch):
    monkeypatch.setattr(onnx_path, "build_engine", _no_work)
    with pytest.raises(ConfigError, match="unknown target"):
        pipeline.build_matrix(tiny_onnx, targets=["sm86", "sm99"], output_dir=tmp_path, cache=False)


def _no_work(*args, **kwargs):
    raise AssertionError("refused too late: export or build started")


@pytest.mark.parametrize(("options", "message"), [
    ({"version_compatible": True}, "libnvinfer_lean.so"),
    ({"hardware_compatibility": "turing_plus"}, "choose one of ampere_plus, same_compute_capability"),
])
def test_refusals_happen_before_export(tiny_module, tmp_path, monkeypatch, options, message):
    monkeypatch.setattr(machine, "find_lean_runtime", lambda: None)
    monkeypatch.setattr(onnx_path, "export_onnx", _no_work)
    with pytest.raises(ConfigError, match=message):
        pipeline.compile(tiny_module, (None,), output_dir=tmp_path, cache=False, **options)


@pytest.mark.skipif(not trt.info().is_rtx, reason="TensorRT-RTX behaviour")
def test_rtx_refuses_hardware_levels_and_gpu_only_builds(monkeypatch):
    with pytest.raises(ConfigError, match="TensorRT-RTX ignores hardware compatibility"):
        portability.check_toolchain(CompileConfig(hardware_compatibility="ampere_plus"))
    monkeypatch.setattr(machine, "cuda_device_count", lambda: 0)
    for option in ("refittable", "strip_weights"):
        with pytest.raises(ConfigError, match="on a GPU, and this machine has none"):
            portability.check_toolchain(CompileConfig(**{option: True}))
    monkeypatch.setattr(machine, "cuda_device_count", lambda: 1)
    both = CompileConfig(refittable=True, strip_weights=True)
    portability.check_toolchain(both)
    assert both.refittable


def test_version_compatible_passes_with_the_lean_runtime_and_records_host_code(monkeypatch):
    monkeypatch.setattr(machine, "find_lean_runtime", lambda: Path("/opt/trt/libnvinfer_lean.so.10"))
    cfg = CompileConfig(version_compatible=True)
    portability.check_toolchain(cfg)
    record = portability.builder_record(cfg)
    assert record["host_code"] is True and record["version_compatible"] is True
    assert portability.builder_record(BASE)["host_code"] is False


def test_runtime_refuses_an_engine_with_host_code(tiny_onnx, tmp_path):
    from trtforge.runtime.tensorrt_route import HostCodeRefused, TensorRTEngine

    art = pipeline.compile(tiny_onnx, output_dir=tmp_path, cache=False, progress=False)
    sc = read_sidecar(art.sidecar_path)
    vc = dataclasses.replace(BASE, version_compatible=True)
    write_sidecar(art.sidecar_path, dataclasses.replace(sc, builder=dataclasses.replace(sc.builder, **portability.builder_record(vc))))
    with pytest.raises(HostCodeRefused, match="allow_host_code=True"):
        TensorRTEngine(art.engine_path, device="cpu")


class FakeTrtBuilderConfig:
    """A double of the ``IBuilderConfig`` calls ``apply_portability`` makes."""

    def __init__(self):
        self.flags = set()
        self.hardware_compatibility_level = None

    def set_flag(self, flag):
        self.flags.add(flag)


def test_apply_portability_sets_the_real_flag_names():
    cfg = FakeTrtBuilderConfig()
    mod = trt.bindings()
    options = dataclasses.replace(BASE, hardware_compatibility="ampere_plus", version_compatible=True,
                                  strip_weights=True)
    portability.apply_portability(cfg, options, mod)
    assert cfg.hardware_compatibility_level == mod.HardwareCompatibilityLevel.AMPERE_PLUS
    assert cfg.flags == {mod.BuilderFlag.VERSION_COMPATIBLE, mod.BuilderFlag.STRIP_PLAN,
                         mod.BuilderFlag.REFIT_IDENTICAL}
    cfg = FakeTrtBuilderConfig()
    portability.apply_portability(cfg, dataclasses.replace(BASE, refittable=True, strip_weights=True), mod)
    assert cfg.flags == {mod.BuilderFlag.REFIT, mod.BuilderFlag.STRIP_PLAN}


@pytest.mark.parametrize("name", portability.TRT_API_USED + timing_cache.TRT_API_USED + build.PARSER_API_USED)
def test_build_option_attributes_exist_on_installed_bindings(name):
    obj = trt.bindings()
    for part in name.split("."):
        assert hasattr(obj, part), f"{trt.info().flavour} {trt.info().version} has no {name}"
        obj = getattr(obj, part)
