"""The engine cache against real TensorRT-RTX builds: hits, recovery from damage, eviction."""

from __future__ import annotations

import logging

import pytest
import torch
from tiny_model import EXAMPLE_SHAPE

import trtforge.pipeline as pipeline
from trtforge.cache.engine_cache import EngineCache, pack, unpack
from trtforge.core import trt
from trtforge.core.sidecar import read_sidecar

pytestmark = pytest.mark.needs_trt


def _compile(model, out, cache_dir, **kw):
    example = None if isinstance(model, (str, type(None))) or hasattr(model, "suffix") else (
        torch.zeros(*EXAMPLE_SHAPE),)
    return pipeline.compile(model, example, output_dir=out, cache_dir=cache_dir, progress=False, **kw)


def test_module_hit_skips_export_and_logs_cache_hit(tiny_module, tmp_path, monkeypatch, caplog):
    first = _compile(tiny_module, tmp_path / "a", tmp_path / "cache")
    assert first.sidecar.builder.cache["hit"] is False

    def no_export(*args, **kwargs):
        raise AssertionError("a cache hit must not export")

    monkeypatch.setattr(pipeline, "export_onnx", no_export)
    monkeypatch.setattr(pipeline, "build_engine", no_export)
    second = _compile(tiny_module, tmp_path / "b", tmp_path / "cache")
    assert second.sidecar.builder.cache["hit"] is True
    assert "cache hit" in caplog.text
    for name in ("engine_path", "onnx_path", "reference_onnx_path"):
        assert getattr(second, name).read_bytes() == getattr(first, name).read_bytes()
    read_sidecar(second.sidecar_path).verify_engine()
    assert second.sidecar.inputs == first.sidecar.inputs and second.sidecar.profiles == first.sidecar.profiles


def test_changed_weights_are_a_miss(tiny_module, tmp_path):
    first = _compile(tiny_module, tmp_path / "a", tmp_path / "cache")
    with torch.no_grad():
        tiny_module.conv.weight.mul_(2)
    second = _compile(tiny_module, tmp_path / "a", tmp_path / "cache", overwrite=True)  # other weights: replace
    assert second.sidecar.builder.cache["hit"] is False
    assert second.sidecar.source.onnx_sha256 != first.sidecar.source.onnx_sha256


@pytest.mark.parametrize("damage", ["flip", "truncate", "json", "member"])
def test_damaged_entry_is_deleted_warned_and_rebuilt(tiny_onnx, tmp_path, caplog, damage):
    first = _compile(tiny_onnx, tmp_path / "a", tmp_path / "cache")
    key = first.sidecar.builder.cache["key"]
    cache = EngineCache(tmp_path / "cache")
    blob = cache.blob_path(key)
    data = bytearray(blob.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 0xFF
        blob.write_bytes(bytes(data))
    elif damage == "truncate":
        blob.write_bytes(bytes(data[: len(data) // 3]))
    elif damage == "json":
        cache.meta_path(key).write_text("{not json")
    else:  # a member whose bytes no longer match its recorded sha256 (blob hash rewritten to match)
        import hashlib
        import json

        import zstandard

        files = unpack(zstandard.ZstdDecompressor().decompress(bytes(data)))
        files["engine"] = files["engine"][:-1] + b"\0"
        new_blob = zstandard.ZstdCompressor().compress(pack(files))
        blob.write_bytes(new_blob)
        meta = json.loads(cache.meta_path(key).read_text())
        meta.update(size=len(new_blob), sha256=hashlib.sha256(new_blob).hexdigest())
        cache.meta_path(key).write_text(json.dumps(meta))
    with caplog.at_level(logging.WARNING):
        second = _compile(tiny_onnx, tmp_path / "b", tmp_path / "cache")
    assert any("rebuilding" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)
    assert second.sidecar.builder.cache == {"key": key, "hit": False}
    read_sidecar(second.sidecar_path).verify_engine()
    if trt.info().is_rtx:  # TensorRT-RTX builds are deterministic; full TensorRT times kernels
        assert second.engine_path.read_bytes() == first.engine_path.read_bytes()
    third = _compile(tiny_onnx, tmp_path / "c", tmp_path / "cache")
    assert third.sidecar.builder.cache["hit"] is True  # the repaired entry serves again


def test_hit_still_refuses_to_overwrite_foreign_files(tiny_onnx, tmp_path):
    _compile(tiny_onnx, tmp_path / "a", tmp_path / "cache")
    out = tmp_path / "b"
    out.mkdir()
    (out / "tiny_fp16.engine").write_bytes(b"somebody else's engine")
    with pytest.raises(FileExistsError, match="trtforge did not write"):
        _compile(tiny_onnx, out, tmp_path / "cache")
    assert (out / "tiny_fp16.engine").read_bytes() == b"somebody else's engine"


def test_cache_off_and_env_override(tiny_onnx, tmp_path, monkeypatch):
    art = _compile(tiny_onnx, tmp_path / "a", None, cache=False)
    assert art.sidecar.builder.cache == {"enabled": False}
    monkeypatch.setenv("TRTFORGE_CACHE_DIR", str(tmp_path / "from_env"))
    art = _compile(tiny_onnx, tmp_path / "a", None)
    assert (tmp_path / "from_env" / "entries" / f"{art.sidecar.builder.cache['key']}.zst").is_file()


def _put(cache, key, size):
    return cache.put(key, {"engine": bytes(range(256)) * (size // 256)}, {"model": key, "precision": "fp32"})


def test_lru_eviction_keeps_recently_used_entries(tmp_path):
    import os
    import time

    cache = EngineCache(tmp_path, max_bytes=10**9)
    for i, key in enumerate(("a" * 64, "b" * 64, "c" * 64)):
        _put(cache, key, 1 << 16)
        os.utime(cache.meta_path(key), (time.time() - 100 + i, time.time() - 100 + i))
    assert cache.get("a" * 64) is not None  # a is now the most recently used
    cache.max_bytes = cache.total_bytes() - 1  # one entry must go: the least recently used, b
    _put(cache, "d" * 64, 16)
    keys = {e.key for e in cache.entries()}
    assert "b" * 64 not in keys and {"a" * 64, "d" * 64} <= keys


def test_prune_and_clear(tmp_path):
    cache = EngineCache(tmp_path)
    _put(cache, "a" * 64, 1024)
    _put(cache, "b" * 64, 1024)
    cache.blob_path("c" * 64).write_bytes(b"orphan")  # a crash between the .zst and its .json
    cache.remember_request("r" * 64, "gone")
    assert cache.prune(max_bytes=10**9) == []
    assert not cache.blob_path("c" * 64).exists() and cache.lookup_request("r" * 64) is None
    assert len(cache.prune(max_bytes=1)) == 2
    _put(cache, "a" * 64, 1024)
    assert cache.clear() == 1 and cache.entries() == []


def test_prune_and_clear_remove_idle_lock_files_only(tmp_path):
    cache = EngineCache(tmp_path)
    locks = tmp_path / "locks"
    with cache.lock("d" * 64):
        pass  # a finished build leaves its lock file behind
    with cache.lock("e" * 64):  # a build still running
        cache.prune(max_bytes=10**9)
        assert sorted(p.stem[0] for p in locks.glob("*.lock")) == ["e"]
        cache.clear()
        assert [p.stem[0] for p in locks.glob("*.lock")] == ["e"]
    cache.clear()
    assert list(locks.glob("*.lock")) == []


def test_unwritable_cache_folder_is_refused_before_export(tiny_module, tmp_path, monkeypatch):
    def no_export(*args, **kwargs):
        raise AssertionError("refused too late")

    monkeypatch.setattr(pipeline, "export_onnx", no_export)
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotADirectoryError, match="is a file; pass a folder"):
        _compile(tiny_module, tmp_path / "o", tmp_path / "file")
    with pytest.raises(PermissionError, match="cannot be created.*cache=False"):
        _compile(tiny_module, tmp_path / "o", tmp_path / "file" / "sub")
