"""The TensorRT route's own logic, run against a test double of the TensorRT runtime API, under each
flavour (full TensorRT 10 and 11, TensorRT-RTX: the ``fake_trt`` fixture), on a GPU of the double's
CUDA runtime (host memory, fake streams)."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import numpy as np
import pytest
import torch
import trt_double
from trt_double import FAKE_CUDA, FakeTrtRuntime, write_fake_engine

import trtforge
from trtforge.core.errors import InternalError, UserError
from trtforge.core.hashing import sha256_file
from trtforge.core.sidecar import EngineHashMismatch, read_sidecar, write_sidecar
from trtforge.runtime.protocol import CapturableEngine, Engine, EngineClosedError, EngineInputError
from trtforge.runtime.tensorrt_route import EngineLoadError, HostCodeRefused, TensorRTEngine

ONE_PROFILE = [{"x": [[1, 3], [4, 3], [8, 3]]}]
TWO_PROFILES = [{"x": [[1, 3], [4, 3], [8, 3]]}, {"x": [[9, 3], [16, 3], [32, 3]]}]


def _engine(fake_trt, tmp_path, profiles=ONE_PROFILE, **kwargs) -> TensorRTEngine:
    return fake_trt.load(write_fake_engine(tmp_path, profiles), **kwargs)


def _set_shape_calls(context) -> list:
    return [c for c in context.calls if c[0] == "set_input_shape"]


def test_specs_and_profiles_come_from_the_engine(fake_trt, tmp_path):
    engine = _engine(fake_trt, tmp_path, TWO_PROFILES)
    assert [s.name for s in engine.inputs] == ["x"]
    assert [s.name for s in engine.outputs] == ["y", "total"]
    assert engine.inputs[0].shape == (-1, 3)
    assert engine.profiles[1]["x"] == {"min": [9, 3], "opt": [16, 3], "max": [32, 3]}
    assert engine.route == "tensorrt" and engine.device == torch.device("cpu")


def test_inputs_bound_by_pointer_and_outputs_trimmed_from_max_buffers(fake_trt, tmp_path):
    engine = _engine(fake_trt, tmp_path)
    x = torch.randn(3, 3)
    out = engine(x)
    context = FakeTrtRuntime.last.engines[0].contexts[0]
    assert context.addresses["x"] == x.data_ptr()  # no copy: the caller's own memory
    torch.testing.assert_close(out["y"], 2 * x + 1)
    torch.testing.assert_close(out["total"], x.sum(dim=1))
    assert out["y"].shape == (3, 3) and out["total"].shape == (3,)
    # Views of buffers preallocated at the profile maximum (8 rows), bound once.
    assert out["y"].untyped_storage().nbytes() == 8 * 3 * 4
    assert out["y"].data_ptr() == context.addresses["y"]
    assert out["total"].data_ptr() == context.addresses["total"]


def test_set_input_shape_only_when_the_shape_changes(fake_trt, tmp_path):
    engine = _engine(fake_trt, tmp_path)
    engine(torch.randn(3, 3))
    context = FakeTrtRuntime.last.engines[0].contexts[0]
    after_first = len(_set_shape_calls(context))
    engine(torch.randn(3, 3))
    assert len(_set_shape_calls(context)) == after_first
    out = engine(x := torch.randn(5, 3))
    assert _set_shape_calls(context)[-1] == ("set_input_shape", "x", (5, 3))
    assert len(_set_shape_calls(context)) == after_first + 1
    torch.testing.assert_close(out["y"], 2 * x + 1)


def test_profile_chosen_by_batch_size(fake_trt, tmp_path):
    engine = _engine(fake_trt, tmp_path, TWO_PROFILES)
    out = engine(x := torch.randn(12, 3))
    torch.testing.assert_close(out["y"], 2 * x + 1)
    contexts = FakeTrtRuntime.last.engines[0].contexts
    assert len(contexts) == 1 and contexts[0].profile == 1
    engine(torch.randn(2, 3))
    assert len(contexts) == 2 and contexts[1].profile == 0
    engine(torch.randn(20, 3))
    assert len(contexts) == 2  # one context per profile, reused


def test_every_context_sets_its_profile_first_on_its_own_stream(fake_trt, tmp_path):
    """A second context of a two-profile engine has no profile until it sets one, profile 0 included
    (TensorRT gives profile 0 implicitly to the first context only)."""
    engine = _engine(fake_trt, tmp_path, TWO_PROFILES)
    engine(torch.randn(12, 3))  # the first context: profile 1
    out = engine(x := torch.randn(2, 3))  # the second: profile 0
    torch.testing.assert_close(out["y"], 2 * x + 1)
    first, second = FakeTrtRuntime.last.engines[0].contexts
    streams = [engine._contexts[p].stream.cuda_stream for p in (1, 0)]
    assert first.calls[0] == ("set_optimization_profile_async", 1, streams[0])
    assert second.calls[0] == ("set_optimization_profile_async", 0, streams[1])  # before any shape
    assert 0 not in streams and streams[0] != streams[1]  # a stream of its own per context


def test_a_call_from_the_legacy_default_stream_with_graph_capture_runs_on_the_routes_stream(fake_trt, tmp_path):
    """The caller is on the legacy default stream (handle 0), where TensorRT cannot capture a graph:
    the route runs on its own stream, ordered after the caller's work and before the caller's next."""
    engine = _engine(fake_trt, tmp_path, cuda_graph=True)
    assert FAKE_CUDA.current_stream(0).cuda_stream == 0
    waits = len(FAKE_CUDA.waits)
    out = engine(x := torch.randn(3, 3))
    torch.testing.assert_close(out["y"], 2 * x + 1)
    own = engine._contexts[0].stream.cuda_stream
    (context,) = FakeTrtRuntime.last.engines[0].contexts
    runs = [c for c in context.calls if c[0] == "execute_async_v3"]  # full TensorRT: warm-ups and the capture
    assert runs and set(runs) == {("execute_async_v3", own)}
    assert FAKE_CUDA.waits[waits:] == [(own, 0), (0, own)]  # events: ours after the caller's, the caller's after ours
    assert engine.native_cuda_graph == fake_trt.rtx  # TensorRT-RTX captures itself; the others on a real GPU


def test_cuda_graph_is_captured_on_the_routes_stream_and_replayed(fake_trt, tmp_path):
    """Full TensorRT: the route captures its enqueue on the context's own stream and replays the graph
    (the double records the enqueue with its bindings and runs it again at each replay); TensorRT-RTX
    captures by itself (WHOLE_GRAPH_CAPTURE), so the route captures nothing."""
    engine = _engine(fake_trt, tmp_path, cuda_graph=True)
    graphs = len(FAKE_CUDA.graphs)
    x = torch.randn(3, 3)
    torch.testing.assert_close(engine(x)["y"], 2 * x + 1)
    x.copy_(torch.randn(3, 3))  # the same buffer, new values: the replay reads them
    torch.testing.assert_close(engine(x)["y"], 2 * x + 1)
    state = engine._contexts[0]
    if fake_trt.rtx:
        assert engine.native_cuda_graph and state.graphs is None and len(FAKE_CUDA.graphs) == graphs
        return
    (graph,) = FAKE_CUDA.graphs[graphs:]
    assert graph.stream == state.stream and len(graph.work) == 1 and graph.replays == 2
    assert state.graphs.captures == 1
    y = engine(z := torch.randn(3, 3))["y"]  # another input address: a second capture
    torch.testing.assert_close(y, 2 * z + 1)
    assert state.graphs.captures == 2


def test_the_double_refuses_a_capture_on_the_legacy_default_stream():
    with pytest.raises(RuntimeError, match="legacy default stream cannot be captured"):
        FAKE_CUDA.capture(lambda: None, 0, FAKE_CUDA.current_stream(0), warmup=0)


def test_a_stream_passed_in_is_the_one_every_context_runs_on(fake_trt, tmp_path):
    stream = FAKE_CUDA.new_stream(0)
    engine = _engine(fake_trt, tmp_path, TWO_PROFILES, stream=stream)
    engine(torch.randn(2, 3))
    with FAKE_CUDA.on_stream(stream):  # the caller on that stream too: nothing to order
        waits = len(FAKE_CUDA.waits)
        engine(torch.randn(12, 3))
        assert FAKE_CUDA.waits[waits:] == []
    runs = [c for ctx in FakeTrtRuntime.last.engines[0].contexts for c in ctx.calls if c[0] == "execute_async_v3"]
    assert runs == [("execute_async_v3", stream.cuda_stream)] * 2
    with pytest.raises(ValueError, match="stream= needs the engine on a CUDA device"):
        TensorRTEngine(write_fake_engine(tmp_path / "cpu", ONE_PROFILE), device="cpu", bindings=fake_trt.bindings,
                       stream=stream)


def test_an_enqueue_failure_quotes_tensorrt_and_names_the_next_step(fake_trt, tmp_path, caplog):
    said = "IExecutionContext::enqueueV3: Error Code 1: Cuda Runtime (an illegal memory access was encountered)"
    engine = fake_trt.load(write_fake_engine(tmp_path, ONE_PROFILE, enqueue_error=said))
    with pytest.raises(UserError) as info:
        engine(torch.randn(2, 3))
    message = str(info.value)
    assert isinstance(info.value, RuntimeError) and not isinstance(info.value, InternalError)
    assert said in message and "execute_async_v3" in message and "\n" not in message
    assert f"trtforge doctor {tmp_path / 'fake.json'}" in message and "rebuild" in message
    assert ("trtforge.tensorrt", logging.ERROR) in [(r.name, r.levelno) for r in caplog.records]  # in the log too


def test_an_engine_tensorrt_cannot_deserialize_is_refused_with_its_reason(fake_trt, tmp_path):
    path = write_fake_engine(tmp_path, ONE_PROFILE)
    path.write_bytes(b"not an engine")
    sidecar = read_sidecar(path)
    write_sidecar(path.with_suffix(".json"), dataclasses.replace(
        sidecar, engine_size=path.stat().st_size, engine_sha256=sha256_file(path)))
    with pytest.raises(EngineLoadError) as info:
        fake_trt.load(path)
    assert "Magic tag does not match" in str(info.value) and "trtforge doctor" in str(info.value)


def test_batch_outside_every_profile_is_refused_with_the_ranges(fake_trt, tmp_path):
    engine = _engine(fake_trt, tmp_path, TWO_PROFILES)
    with pytest.raises(EngineInputError) as info:
        engine(torch.randn(64, 3))
    message = str(info.value)
    assert "[1, 3]..[8, 3]" in message and "[9, 3]..[32, 3]" in message and "[64, 3]" in message


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        (torch.randn(2, 3, dtype=torch.float64), "x.to(torch.float32)"),
        (torch.randn(3, 2).t(), "x.contiguous()"),
        (torch.randn(2, 3, 1), "rank 3"),
        (torch.randn(2, 4), "size 4 on axis 1"),
        (torch.empty(2, 3, device="meta"), "is on meta"),
        ([[1.0, 2.0, 3.0]], "pass a torch.Tensor or a numpy array"),
        (np.zeros((2, 3), np.int64), "astype(np.float32)"),
    ],
    ids=["dtype", "non-contiguous", "rank", "fixed-dim", "device", "type", "numpy-dtype"],
)
def test_bad_inputs_refused_with_the_fix(fake_trt, tmp_path, value, fragment):
    engine = _engine(fake_trt, tmp_path)
    with pytest.raises(EngineInputError, match="x") as info:
        engine(value)
    assert fragment in str(info.value)


def test_numpy_input_copied_explicitly(fake_trt, tmp_path):
    engine = _engine(fake_trt, tmp_path)
    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    out = engine(x=x)
    np.testing.assert_allclose(out["y"].numpy(), 2 * x + 1, rtol=1e-6)


def test_engine_bytes_checked_before_deserializing(fake_trt, tmp_path):
    path = write_fake_engine(tmp_path, ONE_PROFILE)
    path.write_text(path.read_text().replace("8", "9"))
    FakeTrtRuntime.last = None
    with pytest.raises(EngineHashMismatch, match="rebuild"):
        fake_trt.load(path)
    assert FakeTrtRuntime.last is None  # never reached the runtime


def test_host_code_refused_unless_allowed(fake_trt, tmp_path):
    path = write_fake_engine(tmp_path, ONE_PROFILE, host_code=True)
    with pytest.raises(HostCodeRefused, match="allow_host_code=True"):
        fake_trt.load(path)
    fake_trt.load(path, allow_host_code=True)
    assert FakeTrtRuntime.last.engine_host_code_allowed is True
    _engine(fake_trt, tmp_path / "plain")
    assert FakeTrtRuntime.last.engine_host_code_allowed is False  # off by default


def test_real_bindings_refuse_a_cpu_device(tmp_path):
    path = write_fake_engine(tmp_path, ONE_PROFILE)
    with pytest.raises(ValueError, match="needs a CUDA device"):
        TensorRTEngine(path, device="cpu")


def test_close_and_context_manager(fake_trt, tmp_path):
    with _engine(fake_trt, tmp_path) as engine:
        engine(torch.randn(1, 3))
    assert engine.closed
    with pytest.raises(EngineClosedError):
        engine(torch.randn(1, 3))
    engine.close()  # idempotent


def test_capturable_forward_binds_by_pointer_and_enqueues_on_the_stream(fake_trt, tmp_path):
    engine = _engine(fake_trt, tmp_path, TWO_PROFILES)
    assert isinstance(engine, CapturableEngine)
    assert engine.compute_format == (torch.float32, False)  # the engine's FP32 input, linear (NCHW) layout
    x = torch.randn(12, 3)
    out = engine.capturable_forward(x)
    context = FakeTrtRuntime.last.engines[0].contexts[0]
    assert context.profile == 1 and context.addresses["x"] == x.data_ptr()  # chosen by batch, no copy
    assert context.calls[-1] == ("execute_async_v3", 0)  # the caller's current stream (an outer capture's)
    torch.testing.assert_close(out["y"], 2 * x + 1)
    torch.testing.assert_close(out["total"], x.sum(dim=1))
    assert out["y"].data_ptr() == context.addresses["y"]  # the preallocated output, no copy
    x.fill_(1.0)  # same buffer, new values: a second call (a graph replay) reads them
    torch.testing.assert_close(engine.capturable_forward(x)["y"], torch.full((12, 3), 3.0))


@pytest.mark.parametrize(
    ("value", "fragment"),
    [(np.zeros((2, 3), np.float32), "copies nothing"), (torch.randn(3, 2).t(), "x.contiguous()"),
     (torch.randn(2, 3).half(), "x.to(torch.float32)")],
    ids=["numpy", "non-contiguous", "dtype"],
)
def test_capturable_forward_refuses_what_it_would_have_to_copy(fake_trt, tmp_path, value, fragment):
    engine = _engine(fake_trt, tmp_path)
    with pytest.raises(EngineInputError, match="x") as info:
        engine.capturable_forward(value)
    assert fragment in str(info.value)
    calls = [call for context in FakeTrtRuntime.last.engines[0].contexts for call in context.calls]
    assert ("execute_async_v3", 0) not in calls  # refused before anything ran


def test_load_gives_every_route_its_sidecar_at_construction(fake_trt, tmp_path):
    path = write_fake_engine(tmp_path, ONE_PROFILE)
    with trtforge.load(path, route="tensorrt", device="cpu", bindings=fake_trt.bindings) as engine:
        assert isinstance(engine, Engine) and engine.sidecar == read_sidecar(path)
        assert engine.sidecar.builder.flavour == "double"


def test_double_is_a_double_and_production_reads_no_test_hook():
    assert FakeTrtRuntime.__name__.startswith("Fake") and not hasattr(trt_double, "RUNS_ON_HOST_MEMORY")
    sources = "".join(p.read_text() for p in Path(trtforge.__file__).parent.rglob("*.py"))
    assert "RUNS_ON_HOST_MEMORY" not in sources and "trt_double" not in sources
