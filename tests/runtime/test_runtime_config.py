"""TensorRT-RTX runtime features in the TensorRT route, through the double: runtime config, JIT
runtime cache kept on disk (atomic, keyed by engine, GPU and flavour), and the CUDA-graph strategy;
full TensorRT (10 without a runtime config, 11 with one but neither feature) runs without them."""

from __future__ import annotations

import os

import pytest
import torch
from trt_double import FAKE_CUDA, FAKE_TRT, CudaGraphStrategy, FakeTrtRuntime, write_fake_engine

from trtforge.cache.runtime_cache import RuntimeCacheStore, runtime_cache_key
from trtforge.runtime.tensorrt_route import TensorRTEngine

PROFILE = [{"x": [[1, 3], [4, 3], [8, 3]]}]


def _load(path, **kwargs) -> TensorRTEngine:
    return TensorRTEngine(path, device="cuda:0", bindings=FAKE_TRT, devices=FAKE_CUDA, **kwargs)


def test_contexts_come_from_one_runtime_config_where_the_flavour_has_one(fake_trt, tmp_path):
    engine = fake_trt.load(write_fake_engine(tmp_path, PROFILE))
    engine(torch.randn(2, 3))
    fake = FakeTrtRuntime.last.engines[0]
    assert not engine.native_cuda_graph
    if not fake_trt.runtime_config:  # full TensorRT 10: plain contexts
        assert fake.runtime_configs == [] and fake.contexts[0].runtime_config is None
        return
    (config,) = fake.runtime_configs
    assert fake.contexts[0].runtime_config is config
    assert getattr(config, "cuda_graph_strategy", CudaGraphStrategy.DISABLED) == CudaGraphStrategy.DISABLED


def test_cuda_graph_uses_the_runtime_strategy_not_our_capture(tmp_path):
    engine = _load(write_fake_engine(tmp_path, PROFILE), cuda_graph=True)
    out = engine(x := torch.randn(3, 3))
    torch.testing.assert_close(out["y"], 2 * x + 1)
    config = FakeTrtRuntime.last.engines[0].runtime_configs[0]
    assert config.cuda_graph_strategy == CudaGraphStrategy.WHOLE_GRAPH_CAPTURE and engine.native_cuda_graph
    assert engine._contexts[0].graphs is None  # no second capture around the runtime's own


def test_the_runtime_strategy_is_not_asked_for_on_a_device_without_streams(tmp_path):
    """An injected CPU device has no stream but the legacy one, where a capture fails: no strategy."""
    engine = TensorRTEngine(write_fake_engine(tmp_path, PROFILE), device="cpu", bindings=FAKE_TRT, cuda_graph=True)
    torch.testing.assert_close(engine(x := torch.randn(3, 3))["y"], 2 * x + 1)
    assert not engine.native_cuda_graph


@pytest.mark.parametrize("name", ["tensorrt10", "tensorrt11"])
def test_full_tensorrt_keeps_no_runtime_cache(tmp_path, name):
    from trt_double import FakeTensorRT

    store = RuntimeCacheStore(tmp_path / "runtime")
    engine = FakeTensorRT(name).load(write_fake_engine(tmp_path / "e", PROFILE), runtime_cache=store)
    engine(torch.randn(2, 3))
    engine.close()
    assert not engine.runtime_cache_loaded and not (tmp_path / "runtime").exists()


def test_second_process_skips_jit_compilation(tmp_path):
    path = write_fake_engine(tmp_path / "e", PROFILE)
    store = RuntimeCacheStore(tmp_path / "runtime")
    first = _load(path, runtime_cache=store)
    assert not first.runtime_cache_loaded
    first(torch.randn(2, 3))
    first(torch.randn(5, 3))
    assert FakeTrtRuntime.last.engines[0].compilations == 2  # one kernel per shape
    first.close()  # stores the cache
    (blob,) = list((tmp_path / "runtime").glob("*.bin"))
    assert blob.name == f"{runtime_cache_key(**first.runtime_cache_facts())}.bin"
    second = _load(path, runtime_cache=store)
    assert second.runtime_cache_loaded
    out = second(x := torch.randn(5, 3))
    torch.testing.assert_close(out["y"], 2 * x + 1)
    assert FakeTrtRuntime.last.engines[0].compilations == 0
    second(torch.randn(7, 3))  # a new shape still compiles
    assert FakeTrtRuntime.last.engines[0].compilations == 1


def test_key_covers_engine_gpu_and_flavour(tmp_path):
    facts = {"engine_sha256": "a" * 64, "gpu": "NVIDIA GeForce RTX 4090 sm89", "flavour": "tensorrt_rtx 1.7.1.116"}
    key = runtime_cache_key(**facts)
    for name, other in (("engine_sha256", "b" * 64), ("gpu", "NVIDIA GeForce RTX 3090 sm86"),
                        ("flavour", "tensorrt_rtx 1.8.0.1")):
        assert runtime_cache_key(**{**facts, name: other}) != key
    assert runtime_cache_key(**facts) == key and len(key) == 64


def test_a_corrupt_or_foreign_blob_is_ignored_and_replaced(tmp_path):
    path = write_fake_engine(tmp_path / "e", PROFILE)
    store = RuntimeCacheStore(tmp_path / "runtime")
    probe = _load(path, runtime_cache=store)
    target = store.path(**probe.runtime_cache_facts())
    target.parent.mkdir(parents=True)
    target.write_bytes(b"\x00garbage")
    engine = _load(path, runtime_cache=store)
    assert not engine.runtime_cache_loaded  # deserialize refused it; the kernels compile again
    engine(torch.randn(2, 3))
    assert FakeTrtRuntime.last.engines[0].compilations == 1
    engine.close()
    assert _load(path, runtime_cache=store).runtime_cache_loaded  # replaced by a good blob


def test_save_is_atomic_and_a_failed_write_only_warns(tmp_path, caplog):
    store = RuntimeCacheStore(tmp_path / "runtime")
    facts = {"engine_sha256": "c" * 64, "gpu": "cpu", "flavour": "double"}
    written = store.save(b"kernels", **facts)
    assert written.read_bytes() == b"kernels" and store.load(**facts) == b"kernels"
    assert [p.name for p in written.parent.iterdir()] == [written.name]  # no temp file left
    locked = RuntimeCacheStore(tmp_path / "file-not-folder")
    (tmp_path / "file-not-folder").write_text("x")
    assert locked.save(b"kernels", **facts) is None
    assert "could not store the runtime cache" in caplog.text
    if os.name == "posix":
        assert locked.load(**facts) is None
