"""Device placement: the rule for inputs on other devices, the device a request resolves to, and the
TensorRT route making its GPU current (TensorRT's rule) through the test double's CUDA runtime."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from trt_double import FAKE_CUDA, FAKE_TRT, FakeTrtRuntime, write_fake_engine

import trtforge
from trtforge.core.errors import InvalidArgument, MissingDependency, UserError
from trtforge.core.specs import TensorSpec
from trtforge.runtime.placement import (
    InputOnAnotherDevice,
    Placement,
    default_device,
    placement,
    resolve_device,
)
from trtforge.runtime.protocol import EngineInputError
from trtforge.runtime.tensorrt_route import TensorRTEngine
from trtforge.runtime.tensors import bind_input

CPU, GPU0, GPU1 = torch.device("cpu"), torch.device("cuda", 0), torch.device("cuda", 1)
ONE_PROFILE = [{"x": [[1, 3], [4, 3], [8, 3]]}]

#: (input on, engine on, move_inputs, rule)
RULES = [
    (GPU1, GPU1, False, Placement.USE),
    (CPU, CPU, False, Placement.USE),
    (CPU, GPU1, False, Placement.COPY),      # today's staged host → GPU copy, kept
    (CPU, GPU1, True, Placement.COPY),
    (GPU0, GPU1, False, Placement.REFUSE),   # another GPU: refused...
    (GPU0, GPU1, True, Placement.MOVE),      # ...or moved when asked
    (GPU1, GPU0, False, Placement.REFUSE),
    (GPU1, CPU, False, Placement.REFUSE),    # a GPU tensor to a CPU engine
    (GPU1, CPU, True, Placement.MOVE),
    (torch.device("meta"), CPU, False, Placement.REFUSE),
]


@pytest.mark.parametrize(("tensor", "engine", "move", "rule"), RULES)
def test_placement_rule_table(tensor, engine, move, rule):
    assert placement(tensor, engine, move) is rule


#: (asked, GPUs on the machine, current GPU, resolved or the start of the refusal)
DEVICES = [
    (None, 0, 0, CPU),
    (None, 2, 1, GPU1),
    ("cpu", 2, 0, CPU),
    ("cuda", 2, 1, GPU1),
    ("cuda:1", 2, 0, GPU1),
    (1, 2, 0, GPU1),
    (torch.device("cuda", 0), 2, 1, GPU0),
    ("cuda:1", 0, 0, "device cuda:1 asked for, but this machine has no CUDA GPU; use device='cpu'"),
    ("cuda:2", 2, 0, "device cuda:2 asked for, but this machine has 2 CUDA GPU(s) (cuda:0 to cuda:1)"),
    (3, 1, 0, "device cuda:3 asked for, but this machine has 1 CUDA GPU(s) (cuda:0 to cuda:0)"),
    ("gpu7", 2, 0, "device='gpu7' is not a device"),
]


@pytest.mark.parametrize(("asked", "count", "current", "want"), DEVICES)
def test_resolve_device_table(asked, count, current, want):
    if isinstance(want, torch.device):
        assert resolve_device(asked, count=count, current=current) == want
    else:
        with pytest.raises(InvalidArgument) as info:
            resolve_device(asked, count=count, current=current)
        assert str(info.value).startswith(want) and "\n" not in str(info.value)


def test_refusal_names_the_input_both_devices_and_both_fixes():
    spec = TensorSpec("images", "float32", (-1, 3))
    with pytest.raises(InputOnAnotherDevice) as info:
        bind_input(spec, torch.zeros(2, 3, device="meta"), CPU)
    assert str(info.value) == (
        "input 'images' is on meta; this engine runs on cpu. Move it with x.to('cpu'), or load the engine "
        "with move_inputs=True to have each call copy it")
    assert isinstance(info.value, EngineInputError) and isinstance(info.value, UserError)


def test_move_inputs_moves_and_a_host_input_is_staged_as_before():
    spec = TensorSpec("x", "float32", (-1, 3))
    # A CPU input and a numpy array reach the engine with their values whatever move_inputs says.
    x = torch.arange(6, dtype=torch.float32).view(2, 3)
    assert bind_input(spec, x, CPU) is x
    assert torch.equal(bind_input(spec, x.numpy(), CPU, move_inputs=True), x)
    with pytest.raises(InputOnAnotherDevice):
        bind_input(spec, torch.zeros(2, 3, device="meta"), CPU, move_inputs=False)
    with pytest.raises(NotImplementedError, match="meta"):  # moved: torch itself now tries the copy
        bind_input(spec, torch.zeros(2, 3, device="meta"), CPU, move_inputs=True)


def test_a_gpu_on_a_cpu_machine_is_refused_in_one_line_before_the_model_is_built(lite0_sidecar, tmp_path):
    if torch.cuda.is_available():
        pytest.skip("checks the refusal on a machine without CUDA")
    # A factory that would be refused (untrusted) if the model were built before the device check.
    text = lite0_sidecar.read_text().replace("trtforge.zoo:efficientnet_lite0", "os:getcwd")
    (tmp_path / "other.json").write_text(text)
    with pytest.raises(PermissionError):
        trtforge.load(tmp_path / "other.json", route="eager", device="cpu")
    for route in ("eager", "cuda_graph", "fp16"):
        with pytest.raises(InvalidArgument, match=r"^device cuda:1 asked for, but this machine has no CUDA GPU"):
            trtforge.load(tmp_path / "other.json", route=route, device="cuda:1")
    with pytest.raises(MissingDependency, match="CUDA GPU, and this machine has none"):
        trtforge.load(lite0_sidecar, route="tensorrt", device="cuda:1")
    assert default_device(None) == CPU


@pytest.mark.slow
def test_cpu_routes_keep_working_with_device_cpu(lite0_sidecar):
    x = torch.rand(2, 3, 224, 224)
    with trtforge.load(lite0_sidecar, route="eager", device="cpu") as eager, \
            trtforge.load(lite0_sidecar, route="onnxruntime", device="cpu") as ort:
        a, b = eager(x)["logits"], ort(x)["logits"]
    assert a.device == b.device == CPU
    torch.testing.assert_close(a, b, atol=1e-3, rtol=1e-3)  # the FP32 model against ONNX Runtime
    with trtforge.load(lite0_sidecar, route="eager", device="cpu") as eager:
        with pytest.raises(InputOnAnotherDevice, match="input 'images' is on meta; this engine runs on cpu"):
            eager(torch.zeros(1, 3, 224, 224, device="meta"))


# -- the TensorRT route makes its GPU current (through the double's CUDA runtime) ------------------
def _gpu_engine(fake_trt, tmp_path, device, name="fake") -> TensorRTEngine:
    return fake_trt.load(write_fake_engine(tmp_path, ONE_PROFILE, name=name), device=device)


def test_tensorrt_route_deserializes_and_runs_on_its_gpu(fake_trt, tmp_path):
    assert FAKE_CUDA.current() == 0
    engine = _gpu_engine(fake_trt, tmp_path, "cuda:1")
    fake = FakeTrtRuntime.last.engines[-1]
    assert fake.device == 1 and engine.gpu == 1  # deserialized with cuda:1 current
    assert FAKE_CUDA.current() == 0  # the caller's device is restored
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    for _ in range(3):
        np.testing.assert_array_equal(engine(x)["y"].numpy(), 2 * x + 1)
    np.testing.assert_array_equal(engine.capturable_forward(torch.from_numpy(x))["total"].numpy(), x.sum(1))
    (context,) = fake.contexts
    assert context.run_devices == [1, 1, 1, 1]  # every execute_async_v3 with cuda:1 current
    assert FAKE_CUDA.current() == 0
    engine.close()


def test_runtime_config_and_runtime_cache_are_made_on_the_engines_gpu(tmp_path):
    from trtforge.cache.runtime_cache import RuntimeCacheStore

    store = RuntimeCacheStore(tmp_path / "runtime")
    path = write_fake_engine(tmp_path, ONE_PROFILE)
    engine = TensorRTEngine(path, device="cuda:1", bindings=FAKE_TRT, devices=FAKE_CUDA, runtime_cache=store)
    engine(np.zeros((2, 3), np.float32))
    fake = FakeTrtRuntime.last.engines[-1]
    assert [c.device for c in fake.runtime_configs] == [1]
    engine.close()  # stores the kernels the first process compiled, with cuda:1 current
    again = TensorRTEngine(path, device="cuda:1", bindings=FAKE_TRT, devices=FAKE_CUDA, runtime_cache=store)
    assert again.runtime_cache_loaded
    again(np.zeros((2, 3), np.float32))
    assert FakeTrtRuntime.last.engines[-1].compilations == 0  # the stored kernels served the run


def test_a_predictor_over_an_engine_on_gpu_1_runs_there(fake_trt, tmp_path):
    from trtforge.vision import Predictor

    profile = [{"images": [[1, 3, 16, 16], [2, 3, 16, 16], [2, 3, 16, 16]]}]
    path = write_fake_engine(tmp_path, profile, feature_dims=(3, 16, 16), model="channel_mean",
                             preprocessing={"resize": [16, 16]})
    engine = fake_trt.load(path, device="cuda:1")
    frame = np.zeros((24, 32, 3), np.uint8)
    frame[..., 2] = 255  # blue: the channel mean puts class 2 first
    result = Predictor(engine, task="classification", top_k=3)(frame)
    assert result.class_id[0] == 2
    (context,) = FakeTrtRuntime.last.engines[-1].contexts
    assert context.run_devices == [1] and FAKE_CUDA.current() == 0


def test_the_double_fails_a_run_on_another_device(fake_trt, tmp_path):
    """What the route guards against: the double refuses a run with the wrong device current."""
    engine = _gpu_engine(fake_trt, tmp_path, 1)
    engine(np.zeros((2, 3), np.float32))
    (context,) = FakeTrtRuntime.last.engines[-1].contexts
    assert FAKE_CUDA.current() == 0
    assert context.execute_async_v3(0) is False and context.run_devices[-1] == 0


def test_engines_on_two_gpus_run_from_two_threads(fake_trt, tmp_path):
    engines, fakes = [], []
    for i in (0, 1):
        engines.append(_gpu_engine(fake_trt, tmp_path / str(i), f"cuda:{i}", name=f"m{i}"))
        fakes.append(FakeTrtRuntime.last.engines[-1])
    assert [f.device for f in fakes] == [0, 1]
    errors: list[BaseException] = []

    def work(engine: TensorRTEngine, scale: float) -> None:
        try:
            for _ in range(50):
                x = np.full((4, 3), scale, np.float32)
                np.testing.assert_array_equal(engine(x)["y"].numpy(), 2 * x + 1)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(e, float(i))) for i, e in enumerate(engines)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for fake in fakes:
        assert {d for c in fake.contexts for d in c.run_devices} == {fake.device}


def test_tensorrt_route_refuses_a_gpu_the_machine_lacks_before_reading_the_engine(fake_trt, tmp_path):
    path = write_fake_engine(tmp_path, ONE_PROFILE)
    path.write_bytes(b"changed")  # would fail the sha256 check if the engine were read first
    with pytest.raises(InvalidArgument, match=r"device cuda:2 asked for, but this machine has 2 CUDA GPU\(s\)"):
        fake_trt.load(path, device="cuda:2")
