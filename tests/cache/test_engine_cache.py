"""The engine cache against real TensorRT-RTX builds: hits, recovery from damage, eviction."""

from __future__ import annotations

import json
import logging

import pytest
import torch
from tiny_model import EXAMPLE_SHAPE

import trtforge.pipeline as pipeline
import trtforge.pipeline.onnx_path as onnx_path
from trtforge.cache.engine_cache import EngineCache
from trtforge.core import trt
from trtforge.core.sidecar import read_sidecar

pytestmark = pytest.mark.needs_trt


def _compile(model, out, cache_dir, **kw):
    example = None if isinstance(model, (str, type(None))) or hasattr(model, "suffix") else (
        torch.zeros(*EXAMPLE_SHAPE),)
    return pipeline.compile(model, example, output_dir=out, cache_dir=cache_dir, progress=False, **kw)


@pytest.mark.slow
def test_module_hit_skips_export_and_logs_cache_hit(tiny_module, tmp_path, monkeypatch, caplog):
    first = _compile(tiny_module, tmp_path / "a", tmp_path / "cache")
    assert first.sidecar.builder.cache["hit"] is False

    def no_export(*args, **kwargs):
        raise AssertionError("a cache hit must not export")

    monkeypatch.setattr(onnx_path, "export_onnx", no_export)
    monkeypatch.setattr(onnx_path, "build_engine", no_export)
    second = _compile(tiny_module, tmp_path / "b", tmp_path / "cache")
    assert second.sidecar.builder.cache["hit"] is True
    assert "cache hit" in caplog.text
    for name in ("engine_path", "onnx_path", "reference_onnx_path"):
        assert getattr(second, name).read_bytes() == getattr(first, name).read_bytes()
    read_sidecar(second.sidecar_path).verify_engine()
    assert second.sidecar.inputs == first.sidecar.inputs and second.sidecar.profiles == first.sidecar.profiles


@pytest.mark.slow
def test_changed_weights_are_a_miss(tiny_module, tmp_path):
    first = _compile(tiny_module, tmp_path / "a", tmp_path / "cache")
    with torch.no_grad():
        tiny_module.conv.weight.mul_(2)
    second = _compile(tiny_module, tmp_path / "a", tmp_path / "cache", overwrite=True)  # other weights: replace
    assert second.sidecar.builder.cache["hit"] is False
    assert second.sidecar.source.onnx_sha256 != first.sidecar.source.onnx_sha256


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["flip", "truncate", "json", "member"])
def test_damaged_entry_is_deleted_warned_and_rebuilt(tiny_onnx, tmp_path, caplog, damage):
    first = _compile(tiny_onnx, tmp_path / "a", tmp_path / "cache")
    key = first.sidecar.builder.cache["key"]
    cache = EngineCache(tmp_path / "cache")
    engine_sha = json.loads(cache.meta_path(key).read_text())["files"]["engine"]["sha256"]
    blob = cache.blob_path(engine_sha)  # the engine's bytes, stored once by their sha256
    data = bytearray(blob.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 0xFF
        blob.write_bytes(bytes(data))
    elif damage == "truncate":
        blob.write_bytes(bytes(data[: len(data) // 3]))
    elif damage == "json":
        cache.meta_path(key).write_text("{not json")
    else:  # a member whose blob is gone
        blob.unlink()
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


@pytest.mark.slow
def test_cache_off_and_env_override(tiny_onnx, tmp_path, monkeypatch):
    art = _compile(tiny_onnx, tmp_path / "a", None, cache=False)
    assert art.sidecar.builder.cache == {"enabled": False}
    monkeypatch.setenv("TRTFORGE_CACHE_DIR", str(tmp_path / "from_env"))
    art = _compile(tiny_onnx, tmp_path / "a", None)
    assert (tmp_path / "from_env" / "entries" / f"{art.sidecar.builder.cache['key']}.json").is_file()


def _put(cache, key, size):
    """An entry of ``size`` bytes of its own (identical bytes would be stored once, and shared)."""
    return cache.put(key, {"engine": key.encode() + bytes(range(256)) * (size // 256)}, {"model": key, "precision": "fp32"})


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
    cache.blob_path("c" * 64).write_bytes(b"orphan")  # a crash between a blob and its entry's .json
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


def test_cache_folder_that_is_a_file_is_refused_before_export(tiny_module, tmp_path, monkeypatch):
    def no_export(*args, **kwargs):
        raise AssertionError("refused too late")

    monkeypatch.setattr(onnx_path, "export_onnx", no_export)
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotADirectoryError, match="is a file; pass a folder"):
        _compile(tiny_module, tmp_path / "o", tmp_path / "file")


def test_cache_folder_that_cannot_be_created_degrades_to_no_cache(tmp_path, caplog):
    """issue 20: a cache that cannot be written is a machine's state, not a wrong option: one warning line,
    and the build goes on without a cache (docs/reliability.md)."""
    from trtforge.cache.engine_cache import open_engine_cache

    (tmp_path / "file").write_text("x")
    with caplog.at_level(logging.WARNING):
        assert open_engine_cache(tmp_path / "file" / "sub") is None
    assert [r.getMessage() for r in caplog.records if "cannot be written" in r.getMessage()]


@pytest.mark.slow
def test_each_distinct_file_is_stored_once(tiny_onnx, tmp_path):
    """issue 15: every entry held its own copy of the reference ONNX (21 builds of a 21 MB model: 687 MB)."""
    arts = [_compile(tiny_onnx, tmp_path / f"o{level}", tmp_path / "cache", optimization_level=level)
            for level in (1, 2, 3)]
    arts.append(_compile(tiny_onnx, tmp_path / "fp32", tmp_path / "cache", precision="fp32"))
    cache = EngineCache(tmp_path / "cache")
    records = [json.loads(cache.meta_path(a.sidecar.builder.cache["key"]).read_text()) for a in arts]
    members = [info["sha256"] for r in records for info in r["files"].values()]
    blobs = sorted(p.name for p in (tmp_path / "cache" / "blobs").iterdir())
    assert blobs == sorted(set(members))  # one blob per distinct file, none unnamed
    reference = {r["files"]["reference.onnx"]["sha256"] for r in records}
    assert len(reference) == 1 and len(members) == 16 and len(blobs) <= 10
    assert cache.total_bytes() == sum(p.stat().st_size for p in (tmp_path / "cache" / "blobs").iterdir())
    cache.remove(arts[0].sidecar.builder.cache["key"])  # the shared reference stays for the others
    assert cache.blob_path(next(iter(reference))).is_file()
    assert _compile(tiny_onnx, tmp_path / "again", tmp_path / "cache", optimization_level=2).sidecar.builder.cache["hit"]


def test_a_hit_links_the_checked_blobs_and_writes_no_graph_or_engine_bytes(tiny_onnx, tmp_path, monkeypatch):
    """issue 15: an ONNX-source hit unpacked and rewrote every file. Now it hard-links the blobs (same file
    system), never parses the ONNX file, and the files read back byte for byte."""
    import onnx

    first = _compile(tiny_onnx, tmp_path / "a", tmp_path / "cache")

    def no_parse(*args, **kwargs):
        raise AssertionError("a hit on a plain ONNX file must not parse it")

    monkeypatch.setattr(onnx, "load", no_parse)
    monkeypatch.setattr(onnx, "load_model", no_parse)
    second = _compile(tiny_onnx, tmp_path / "b", tmp_path / "cache")
    monkeypatch.undo()
    assert second.sidecar.builder.cache["hit"] is True
    cache = EngineCache(tmp_path / "cache")
    members = json.loads(cache.meta_path(second.sidecar.builder.cache["key"]).read_text())["files"]
    for name, member in (("engine_path", "engine"), ("onnx_path", "processed.onnx"),
                         ("reference_onnx_path", "reference.onnx")):
        written = getattr(second, name)
        assert written.read_bytes() == getattr(first, name).read_bytes()
        assert written.stat().st_ino == cache.blob_path(members[member]["sha256"]).stat().st_ino  # a link
    assert second.sidecar.engine_sha256 == members["engine"]["sha256"] == first.sidecar.engine_sha256
    read_sidecar(second.sidecar_path).verify_engine()


def test_a_blob_with_other_permission_bits_is_copied_not_linked(tiny_onnx, tmp_path):
    first = _compile(tiny_onnx, tmp_path / "a", tmp_path / "cache")
    cache = EngineCache(tmp_path / "cache")
    engine_blob = cache.blob_path(first.sidecar.engine_sha256)
    engine_blob.chmod(0o600)  # a link would give the artifact these bits: it gets a copy with the usual ones
    second = _compile(tiny_onnx, tmp_path / "b", tmp_path / "cache")
    assert second.sidecar.builder.cache["hit"] is True
    assert second.engine_path.stat().st_ino != engine_blob.stat().st_ino
    assert second.engine_path.stat().st_mode & 0o777 == second.sidecar_path.stat().st_mode & 0o777
    assert second.engine_path.read_bytes() == first.engine_path.read_bytes()


def test_an_in_place_edit_of_a_linked_artifact_is_caught_and_rebuilt(tiny_onnx, tmp_path, caplog):
    """A hit's files share the cache's blobs: an edit in place (trtforge never makes one) damages the
    blob too. The sidecar's hash check and the cache's both catch it; the next compile rebuilds."""
    first = _compile(tiny_onnx, tmp_path / "a", tmp_path / "cache")
    second = _compile(tiny_onnx, tmp_path / "b", tmp_path / "cache")
    with open(second.engine_path, "r+b") as handle:
        handle.seek(100)
        handle.write(b"\xff\xfe")
    with pytest.raises(Exception, match="does not match its sidecar"):
        read_sidecar(second.sidecar_path).verify_engine()
    with caplog.at_level(logging.WARNING):
        third = _compile(tiny_onnx, tmp_path / "c", tmp_path / "cache")
    assert third.sidecar.builder.cache["hit"] is False and "rebuilding" in caplog.text
    if trt.info().is_rtx:  # TensorRT-RTX builds are deterministic
        assert third.engine_path.read_bytes() == first.engine_path.read_bytes()
