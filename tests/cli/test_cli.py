"""The ``trtforge`` command: build, inspect (with the hash check) and clear errors."""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from onnx import TensorProto, helper
from typer.testing import CliRunner

import trtforge
from trtforge.cli import app
from trtforge.cli.app import guarded
from trtforge.cli.build import BUILD_PARAMETERS, QUANT_PARAMETERS, config_from_cli
from trtforge.core.config import CompileConfig, QuantConfig
from trtforge.core.errors import Cancelled, InvalidArgument

trtforge_root = Path(trtforge.__file__).parent

runner = CliRunner()


def _tiny(tmp_path):
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[1, 1, 1, 1])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4, 16, 16])],
        [helper.make_tensor("w", TensorProto.FLOAT, [4, 3, 3, 3], [0.1] * 108)],
    )
    path = tmp_path / "conv.onnx"
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]).SerializeToString())
    return path


def test_build_then_inspect(tmp_path):
    model = _tiny(tmp_path)
    out = tmp_path / "out"
    result = runner.invoke(app, ["build", str(model), "--precision", "fp16", "--batch", "1:8:32",
                                 "--target", "sm89", "-o", str(out), "--quiet"])
    assert result.exit_code == 0, result.output
    (sidecar,) = out.glob("conv_fp16*.json")  # a target may add a file-name suffix
    engine = sidecar.with_suffix(".engine")
    data = json.loads(sidecar.read_text())
    assert data["builder"]["targets"] == ["sm89"]
    assert data["profiles"][0]["x"]["max"] == [32, 3, 16, 16]
    shown = runner.invoke(app, ["inspect", str(engine)])
    assert shown.exit_code == 0, shown.output
    assert "sha256 OK" in shown.output and "1×3×16×16" in shown.output and "32×3×16×16" in shown.output
    engine.write_bytes(engine.read_bytes()[:-10])
    tampered = runner.invoke(app, ["inspect", str(sidecar)])
    assert tampered.exit_code == 1
    assert "does not match its sidecar" in tampered.output


def test_bad_input_is_one_clear_line(tmp_path):
    result = runner.invoke(app, ["build", str(_tiny(tmp_path)), "--batch", "8:4:16", "-o", str(tmp_path)])
    assert result.exit_code == 2
    assert "min <= opt <= max" in result.output
    assert "Traceback" not in result.output
    missing = runner.invoke(app, ["inspect", str(tmp_path / "none.json")])
    assert missing.exit_code == 2 and "no sidecar" in missing.output


def test_user_errors_print_literally_without_markup_or_emoji(tmp_path):
    model = _tiny(tmp_path)
    # ":-1:" is rich's thumbs-down emoji code and "[red]" is markup: both must print as typed.
    result = runner.invoke(app, ["build", str(model), "--batch=-1:-1:-1", "-o", str(tmp_path)])
    assert result.exit_code == 2 and "error:" in result.output
    assert "-1:-1:-1" in result.output and "Traceback" not in result.output
    named = runner.invoke(app, ["build", str(model), "--name", "a[red]b", "-o", str(tmp_path)])
    assert named.exit_code == 2 and "name 'a[red]b'" in named.output


def _guarded_app(error: BaseException) -> typer.Typer:
    """A one-command app whose command raises ``error`` behind the CLI's handler."""
    small = typer.Typer()

    @small.command()
    @guarded
    def fail() -> None:
        raise error

    @small.command()
    @guarded
    def other() -> None:  # a second command, so typer keeps the command name
        pass

    return small


def test_a_bug_keeps_its_traceback_and_says_it_is_a_bug():
    result = runner.invoke(_guarded_app(TypeError("unsupported operand")), ["fail"])
    assert result.exit_code == 1
    assert "Traceback" in result.output and "TypeError: unsupported operand" in result.output
    assert "bug in trtforge" in result.output


def test_exit_codes_of_user_errors_interrupts_and_os_errors():
    user = runner.invoke(_guarded_app(InvalidArgument("batch=0: pass batch=1")), ["fail"])
    assert user.exit_code == 2 and "error: batch=0: pass batch=1" in user.output and "Traceback" not in user.output
    cancelled = runner.invoke(_guarded_app(KeyboardInterrupt()), ["fail"])
    assert cancelled.exit_code == 1 and "error: interrupted (Ctrl-C); no file was left half-written" in cancelled.output
    assert "Traceback" not in cancelled.output and "bug" not in cancelled.output
    stopped = runner.invoke(_guarded_app(Cancelled("build of m cancelled by the user; nothing was written")), ["fail"])
    assert stopped.exit_code == 1
    assert "error: interrupted (Ctrl-C); no file was left half-written" in stopped.output  # one line at every stage
    full = runner.invoke(_guarded_app(OSError(errno.ENOSPC, "No space left on device", "/out/m.engine")), ["fail"])
    assert full.exit_code == 1 and "No space left on device" in full.output
    assert "Traceback" not in full.output and "bug" not in full.output
    # A builtin raise is no longer taken for a user error: it is a bug, with its traceback.
    plain = runner.invoke(_guarded_app(ValueError("x")), ["fail"])
    assert plain.exit_code == 1 and "Traceback" in plain.output and "bug in trtforge" in plain.output


def test_build_options_are_the_config_fields():
    names = {p.name for p in BUILD_PARAMETERS + QUANT_PARAMETERS}
    for flag in ("precision", "batch", "target", "output_dir", "name", "opt_level", "workspace_mb", "calibrator",
                 "smoothquant", "bias_correction", "placement", "error_budget", "exclude", "include",
                 "preprocessing", "quiet", "cache", "cache_dir", "timing_cache", "hardware_compatibility",
                 "version_compatible", "refittable", "strip_weights"):
        assert flag in names
    config = config_from_cli({**{p.name: _default(p) for p in BUILD_PARAMETERS + QUANT_PARAMETERS},
                              "workspace_mb": 64, "quiet": True, "target": ["sm89"], "exclude": ["_fc"]})
    assert config.workspace_bytes == 64 << 20 and config.progress is False and config.targets == ("sm89",)
    assert config.quant.exclude == ("_fc",) and config.quant.cache_dir == Path("trtforge_out") / "calib_cache"
    assert dataclasses.replace(config, progress=True, workspace_bytes=None, targets=(), quant=QuantConfig()) \
        == dataclasses.replace(CompileConfig(), quant=QuantConfig())


def _default(parameter):
    return parameter.signature().default


LAZY_SCRIPT = """
import json, sys
from typer.testing import CliRunner
import trtforge
from trtforge.cli import app
from trtforge.core.sidecar import Sidecar, write_sidecar
from trtforge.core.specs import TensorSpec
folder = sys.argv[1]
trtforge.load, trtforge.CompileConfig, trtforge.Artifact
engine = folder + "/m_fp16.engine"
open(engine, "wb").write(b"engine bytes")
import hashlib
write_sidecar(folder + "/m_fp16.json", Sidecar(
    name="m", engine_file="m_fp16.engine", engine_size=12, engine_sha256=hashlib.sha256(b"engine bytes").hexdigest(),
    inputs=(TensorSpec("x", "float32", (-1, 3)),), outputs=(TensorSpec("y", "float32", (-1, 3)),),
    profiles=(), precision={"built": "fp16"}, builder={"flavour": "tensorrt_rtx"}, source={"kind": "onnx"}))
runner = CliRunner()
codes = [runner.invoke(app, args).exit_code for args in (
    ["--help"], ["build", "--help"], ["inspect", folder + "/m_fp16.json"], ["cache", "ls", "--cache-dir", folder + "/c"])]
heavy = ("torch", "numpy", "onnx", "onnxscript", "onnx_ir", "onnxruntime", "tensorrt", "tensorrt_rtx", "trtforge.pipeline",
         "trtforge.capture", "trtforge.passes", "trtforge.quantize", "trtforge.builder.build", "trtforge.vision")
print(json.dumps({"codes": codes, "loaded": sorted(m for m in sys.modules if m.startswith(heavy))}))
"""


@pytest.mark.slow
def test_help_inspect_cache_and_load_never_import_the_compile_stack(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(Path(trtforge_root).parent)}
    out = subprocess.run([sys.executable, "-c", LAZY_SCRIPT, str(tmp_path)], env=env, check=True,
                         capture_output=True, text=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result == {"codes": [0, 0, 0, 0], "loaded": []}


ONNX_BUILD_SCRIPT = """
import json, sys
from typer.testing import CliRunner
from trtforge.cli import app
result = CliRunner().invoke(app, ["build", sys.argv[1], "-o", sys.argv[2], "-q"])
print(json.dumps({"code": result.exit_code, "torch": "torch" in sys.modules}))
"""


@pytest.mark.slow
@pytest.mark.needs_trt
def test_building_an_onnx_file_never_imports_torch(tmp_path):
    """torch is half a build process's start-up (4 of 7.5 CPU seconds for a cache hit); an .onnx needs none of it."""
    env = {**os.environ, "PYTHONPATH": str(Path(trtforge_root).parent), "TRTFORGE_CACHE_DIR": str(tmp_path / "cache")}
    out = subprocess.run([sys.executable, "-c", ONNX_BUILD_SCRIPT, str(_tiny(tmp_path)), str(tmp_path / "out")],
                         env=env, check=True, capture_output=True, text=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"code": 0, "torch": False}
    assert (tmp_path / "out" / "conv_fp16.engine").is_file()
