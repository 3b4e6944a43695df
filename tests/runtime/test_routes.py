"""PyTorch and ONNX Runtime routes agree with the model they came from (real weights, real photos)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

import trtforge
from trtforge.core.errors import MissingFile
from trtforge.core.sidecar import read_sidecar
from trtforge.core.specs import TensorSpec
from trtforge.runtime import CapturableEngine, Engine, EngineInputError
from trtforge.runtime.onnxruntime_route import OnnxRuntimeEngine
from trtforge.runtime.torch_routes import TorchEngine


@pytest.fixture(scope="module")
def reference(lite0, photo_batch) -> torch.Tensor:
    with torch.inference_mode():
        return lite0(torch.from_numpy(photo_batch))


def _check_close(out: torch.Tensor, ref: torch.Tensor, tol: float) -> None:
    assert out.dtype == torch.float32 and out.shape == ref.shape
    rel = ((out - ref).norm() / ref.norm()).item()
    assert rel < tol, f"relative error {rel:.2e} over {tol:.0e}"
    assert torch.equal(out.argmax(1), ref.argmax(1))


@pytest.mark.slow
def test_onnxruntime_route_matches_model(lite0_sidecar, photo_batch, reference):
    with trtforge.load(lite0_sidecar, route="onnxruntime") as engine:
        assert isinstance(engine, Engine) and engine.route == "onnxruntime"
        assert engine.sidecar == read_sidecar(lite0_sidecar)  # carried from construction
        assert not isinstance(engine, CapturableEngine)  # ONNX Runtime cannot run inside a CUDA graph
        assert engine.inputs[0].shape == (-1, 3, 224, 224) and engine.outputs[0].name == "logits"
        _check_close(engine(photo_batch)["logits"], reference, 1e-5)


@pytest.mark.slow
@pytest.mark.parametrize(("route", "tol"), [("eager", 1e-6), ("fp16", 1e-2), ("cuda_graph", 1e-2)])
def test_torch_routes_match_model(lite0_sidecar, photo_batch, reference, route, tol):
    # No GPU here: every route falls back to the CPU; cuda_graph runs its FP16 module without graphs.
    with trtforge.load(lite0_sidecar, route=route) as engine:
        assert engine.device == torch.device("cpu") and engine.route == route
        assert isinstance(engine, CapturableEngine) and engine.sidecar == read_sidecar(lite0_sidecar)
        assert engine.cuda_graph is False  # no GPU: no graphs, so the predictor does not capture by default
        _check_close(engine(images=torch.from_numpy(photo_batch))["logits"], reference, tol)
        assert engine.graph_captures == 0


def test_fp16_route_leaves_the_callers_model_alone(lite0):
    spec = TensorSpec("images", "float32", (-1, 3, 224, 224))
    TorchEngine(lite0, [spec], ["logits"], route="fp16", device="cpu").close()
    assert next(lite0.parameters()).dtype == torch.float32


def _relu_mlp() -> torch.nn.Module:
    """A small MLP for the torch.compile tests: one graph and batch (5), compiled once per run (inductor's cache)."""
    with torch.random.fork_rng():
        torch.manual_seed(1)
        return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).eval()


@pytest.mark.slow
@pytest.mark.xdist_group("compiled_route")  # one worker: the run's package probed, the MLP compiled, once
def test_compiled_route_with_torch_compile():
    model = _relu_mlp()
    spec = TensorSpec("x", "float32", (-1, 8))
    x = torch.randn(5, 8)
    # "default" keeps the test short on 2 cores; the route's default is "max-autotune" (see bench/).
    with TorchEngine(model, [spec], ["y"], route="compiled", device="cpu", compile_mode="default") as engine:
        torch.testing.assert_close(engine(x)["y"], model(x).detach())


@pytest.mark.slow  # the run's AOTInductor package (aot_mlp)
@pytest.mark.xdist_group("compiled_route")  # one worker: the run's package probed, the MLP compiled, once
def test_compiled_route_from_aot_package_without_the_model(aot_mlp):
    model, spec, package = aot_mlp
    with TorchEngine(None, [spec], ["y"], route="compiled", device="cpu", aot_package=package) as engine:
        for batch in (1, 7):
            x = torch.randn(batch, 8)
            torch.testing.assert_close(engine(x)["y"], model(x).detach(), rtol=1e-5, atol=1e-5)


def test_batch_out_of_profile_refused_with_range(lite0_sidecar):
    with trtforge.load(lite0_sidecar, route="eager") as engine:
        with pytest.raises(EngineInputError, match=r"\[1, 3, 224, 224\]\.\.\[8, 3, 224, 224\]"):
            engine(torch.zeros(9, 3, 224, 224))
        with pytest.raises(EngineInputError, match="rank 3"):
            engine(torch.zeros(3, 224, 224))
        with pytest.raises(EngineInputError, match="expects torch.float32"):
            engine(torch.zeros(1, 3, 224, 224, dtype=torch.float16))
        with pytest.raises(EngineInputError, match="is on meta"):
            engine(torch.zeros(1, 3, 224, 224, device="meta"))
    with trtforge.load(lite0_sidecar, route="onnxruntime") as engine:
        with pytest.raises(EngineInputError, match="outside every optimization profile"):
            engine(np.zeros((9, 3, 224, 224), np.float32))


def test_load_refusals(lite0_sidecar, tmp_path):
    with pytest.raises(ValueError, match="unknown route 'tensorflow'"):
        trtforge.load(lite0_sidecar, route="tensorflow")
    onnx = lite0_sidecar.parent / "efficientnet_lite0_fp32.onnx"
    with pytest.raises(ValueError, match="route='onnxruntime'"):
        trtforge.load(onnx, route="eager")
    with pytest.raises(ValueError, match="no CUDA GPU"):
        trtforge.load(lite0_sidecar, route="eager", device="cuda")
    text = lite0_sidecar.read_text().replace("trtforge.zoo:efficientnet_lite0", "os:getcwd")
    (tmp_path / "evil.json").write_text(text)
    with pytest.raises(PermissionError, match="trust_factory=True"):
        trtforge.load(tmp_path / "evil.json", route="eager")


@pytest.mark.slow  # the run's AOTInductor package (aot_mlp), and a torch.compile of another model
@pytest.mark.xdist_group("compiled_route")  # one worker: the run's package probed, the MLP compiled, once
def test_compiled_route_loads_the_aot_package_beside_the_engine(tmp_path, aot_mlp, aot_mlp_sidecar):
    model, _, package = aot_mlp
    # export_aot_beside wrote the package beside the engine, named <name>_aot_<device>.pt2
    assert package == aot_mlp_sidecar.parent / "mlp_aot_cpu.pt2" and package.is_file()
    for name in (aot_mlp_sidecar.name, "mlp.engine"):  # the same artifact without its package
        shutil.copyfile(aot_mlp_sidecar.parent / name, tmp_path / name)
    with pytest.raises(ValueError, match="names no factory"):
        trtforge.load(tmp_path / aot_mlp_sidecar.name, route="compiled", device="cpu")
    with trtforge.load(aot_mlp_sidecar, route="compiled", device="cpu") as engine:
        assert engine.aot_package == package
        x = torch.randn(5, 8)
        torch.testing.assert_close(engine(x)["y"], model(x).detach(), rtol=1e-5, atol=1e-5)
        with pytest.raises(EngineInputError, match=r"\[1, 8\]\.\.\[8, 8\]"):
            engine(torch.randn(9, 8))
    # aot_package=False: the package beside the engine is ignored, the model passed is compiled instead (another
    # model than the package's, so the outputs tell which ran; the graph of test_compiled_route_with_torch_compile)
    other = _relu_mlp()
    with trtforge.load(aot_mlp_sidecar, route="compiled", device="cpu", model=other, aot_package=False,
                       compile_mode="default") as engine:
        assert engine.aot_package is None
        torch.testing.assert_close(engine(x)["y"], other(x).detach(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("how", ["constructor", "load"])
def test_a_missing_onnx_file_names_the_fix(tmp_path, how):
    (tmp_path / "dir.onnx").mkdir()
    for path, found in ((tmp_path / "nope.onnx", "nothing there"), (tmp_path / "dir.onnx", "a folder there")):
        with pytest.raises(MissingFile) as info:
            OnnxRuntimeEngine(path) if how == "constructor" else trtforge.load(path, route="onnxruntime")
        message = str(info.value)
        assert "\n" not in message and message.startswith(f"no ONNX file at {path} ({found}); ")
        assert "pass the path of an existing .onnx file" in message
        assert "trtforge.load('out/model.json', route='onnxruntime')" in message
