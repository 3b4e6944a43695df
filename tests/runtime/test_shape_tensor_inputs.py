"""Shape-tensor inputs at run time (a Reshape's shape given as an input): the TensorRT route feeds
their values from host memory and refuses values the engine was not built for; ONNX Runtime and
the PyTorch routes take the same inputs. The engine is a real TensorRT-RTX build (its sidecar records
the values); it runs through the TensorRT double, whose shape tensors follow TensorRT's documented
semantics. References: ONNX Runtime on the user's ONNX file, and numpy's reshape."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper
from trt_double import FakeTrtRuntime, mirror_engine

import trtforge
from trtforge.core.sidecar import read_sidecar
from trtforge.runtime.protocol import EngineInputError
from trtforge.runtime.tensorrt_route import TensorRTEngine
from trtforge.runtime.torch_routes import TorchEngine

X = np.arange(6, dtype=np.float32).reshape(2, 3)
SHAPE = np.array([3, 2], np.int64)


@pytest.fixture(scope="module")
def reshape_model(tmp_path_factory) -> tuple[Path, Path]:
    """(the user's ONNX file, the sidecar of its real TensorRT-RTX build with shape = [3, 2])."""
    folder = tmp_path_factory.mktemp("reshape")
    graph = helper.make_graph([helper.make_node("Reshape", ["x", "shape"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
                               helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b"])])
    path = folder / "reshape.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    art = trtforge.compile(str(path), {"x": X, "shape": SHAPE}, precision="fp32", output_dir=folder / "out",
                           progress=False, cache=False)
    return path, Path(art.sidecar_path)


def _reference(onnx_path: Path, shape) -> np.ndarray:
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    return session.run(["y"], {"x": X, "shape": np.asarray(shape, np.int64)})[0]


@pytest.fixture
def trt_engine(reshape_model, tmp_path, fake_trt) -> TensorRTEngine:
    """The build's double under each flavour, on a GPU of the double's CUDA runtime."""
    return fake_trt.load(mirror_engine(tmp_path, read_sidecar(reshape_model[1]), "reshape"))


def test_the_real_build_records_the_shape_input(reshape_model):
    sidecar = read_sidecar(reshape_model[1])
    assert [(r.name, r.values) for r in sidecar.shape_inputs] == [("shape", (3, 2))]
    assert [(s.name, s.dtype) for s in sidecar.inputs] == [("x", "float32"), ("shape", "int64")]
    assert sidecar.outputs[0].shape == (-1, -1)  # the output's shape comes from the values


@pytest.mark.parametrize(
    "shape",
    [[3, 2], (3, 2), SHAPE, SHAPE.astype(np.int32), torch.tensor([3, 2]), torch.tensor([3, 2], dtype=torch.int32),
     None],
    ids=["list", "tuple", "numpy", "numpy-int32", "torch", "torch-int32", "omitted"])
def test_tensorrt_route_feeds_the_values_from_host_memory(reshape_model, trt_engine, shape):
    assert trt_engine.shape_inputs == ("shape",)
    out = trt_engine(torch.from_numpy(X)) if shape is None else trt_engine(torch.from_numpy(X), shape=shape)
    np.testing.assert_array_equal(out["y"].numpy(), _reference(reshape_model[0], SHAPE))
    np.testing.assert_array_equal(out["y"].numpy(), X.reshape(3, 2))
    context = FakeTrtRuntime.last.engines[0].contexts[0]
    host = trt_engine._contexts[0].host_values["shape"]
    # Bound to the context's own int64 host buffer (the engine's dtype), never to the caller's memory.
    assert context.addresses["shape"] == host.data_ptr() and host.dtype == torch.int64
    assert host.tolist() == [3, 2]
    if isinstance(shape, torch.Tensor | np.ndarray):
        address = shape.data_ptr() if isinstance(shape, torch.Tensor) else shape.ctypes.data
        assert context.addresses["shape"] != address


def test_positional_and_capturable_calls_take_the_values_too(reshape_model, trt_engine):
    x = torch.from_numpy(X)
    np.testing.assert_array_equal(trt_engine(x, [3, 2])["y"].numpy(), X.reshape(3, 2))
    np.testing.assert_array_equal(trt_engine.capturable_forward(x, [3, 2])["y"].numpy(), X.reshape(3, 2))
    np.testing.assert_array_equal(trt_engine.capturable_forward(x)["y"].numpy(), X.reshape(3, 2))


@pytest.mark.parametrize("shape", [[2, 3], [6, 1], [-1, 2]])
def test_values_the_engine_was_not_built_for_are_refused_before_tensorrt_runs(trt_engine, shape):
    with pytest.raises(EngineInputError) as info:
        trt_engine(torch.from_numpy(X), shape=shape)
    message = str(info.value)
    assert "\n" not in message
    assert f"'shape' = {shape}" in message and "built for ([3, 2])" in message and "shape=[3, 2]" in message
    contexts = FakeTrtRuntime.last.engines[0].contexts
    assert not [c for ctx in contexts for c in ctx.calls if c[0] == "execute_async_v3"]


@pytest.mark.parametrize(("shape", "fragment"), [
    ([3.0, 2.0], "got float64"), (torch.tensor([3.0, 2.0]), "got float32"), ("3,2", "got str"),
    ([3, 2, 1], "size 3 on axis 0"), ([2**40, 1], "'shape' = [1099511627776, 1]"),
], ids=["floats", "float-tensor", "string", "length", "large"])
def test_bad_shape_values_are_refused_in_one_line(trt_engine, shape, fragment):
    with pytest.raises(EngineInputError) as info:
        trt_engine(torch.from_numpy(X), shape=shape)
    assert "\n" not in str(info.value) and "'shape'" in str(info.value) and fragment in str(info.value)


def test_the_double_reads_shape_values_on_the_host_and_refuses_device_pointers(reshape_model, trt_engine):
    x = torch.from_numpy(X.copy())
    trt_engine(x)
    context = FakeTrtRuntime.last.engines[0].contexts[0]
    host = trt_engine._contexts[0].host_values["shape"]
    assert context.get_tensor_shape("y") == (3, 2)  # read from the host buffer
    host.copy_(torch.tensor([6, 1]))
    assert context.get_tensor_shape("y") == (6, 1)
    assert context.execute_async_v3(0) is False  # outside the profile's values, as TensorRT refuses
    host.copy_(torch.tensor([3, 2]))
    assert context.execute_async_v3(0) is True
    # Device memory holding valid values: x's own bytes, whose first 16 are the int64 values [3, 2].
    memory = torch.zeros(6, dtype=torch.float32)
    memory.view(torch.int64)[:2] = torch.tensor([3, 2])
    trt_engine(memory.view(2, 3))
    context.set_tensor_address("shape", memory.data_ptr())
    assert context.get_tensor_shape("y") == (3, 2)
    assert context.execute_async_v3(0) is False  # a device pointer: TensorRT reads shape tensors on the host
    context.set_tensor_address("shape", host.data_ptr())
    assert context.execute_async_v3(0) is True


def test_onnxruntime_route_feeds_the_values_on_the_host(reshape_model):
    with trtforge.load(reshape_model[1], route="onnxruntime") as engine:
        for shape in ([3, 2], torch.tensor([3, 2], dtype=torch.int32), SHAPE):
            np.testing.assert_array_equal(engine(X, shape=shape)["y"].numpy(), _reference(reshape_model[0], SHAPE))
        np.testing.assert_array_equal(engine(X)["y"].numpy(), X.reshape(3, 2))  # the recorded values
        # ONNX Runtime runs the ONNX graph, which takes any values: it just feeds them.
        np.testing.assert_array_equal(engine(X, [6, 1])["y"].numpy(), _reference(reshape_model[0], [6, 1]))


class _Reshape(torch.nn.Module):
    """The ONNX model's PyTorch twin: it records what reached it."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[torch.Tensor] = []

    def forward(self, x: torch.Tensor, shape: torch.Tensor) -> torch.Tensor:
        self.seen.append(shape)
        return x.reshape(shape.tolist())


@pytest.mark.parametrize("route", ["eager", "fp16", "cuda_graph"])
def test_torch_routes_pass_the_values_as_cpu_integers(reshape_model, route):
    sidecar = read_sidecar(reshape_model[1])
    engine = TorchEngine(_Reshape(), sidecar.inputs, sidecar.outputs, route=route, device="cpu", sidecar=sidecar)
    for shape in ([3, 2], torch.tensor([3, 2], dtype=torch.int32), None):
        out = engine(X) if shape is None else engine(X, shape=shape)
        np.testing.assert_allclose(out["y"].numpy(), _reference(reshape_model[0], SHAPE))
        seen = engine._module.seen[-1]
        assert seen.dtype == torch.int64 and seen.device.type == "cpu" and seen.tolist() == [3, 2]
    np.testing.assert_allclose(engine(X, shape=[6, 1])["y"].numpy(), X.reshape(6, 1))
