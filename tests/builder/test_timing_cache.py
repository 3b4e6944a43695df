"""Timing cache: path refusals before any work, the RTX no-op said once, merge and replace (full TensorRT double)."""

from __future__ import annotations

import logging

import pytest

import trtforge.pipeline as pipeline
import trtforge.pipeline.onnx_path as onnx_path
from trtforge.builder import timing_cache
from trtforge.builder.timing_cache import TimingCacheSession, check_timing_cache_path

pytestmark = pytest.mark.needs_trt


def _no_work(*args, **kwargs):
    raise AssertionError("refused too late: export or build started")


@pytest.mark.parametrize("kind", ["directory", "separator"])
def test_directory_or_trailing_separator_is_a_value_error(tiny_module, tmp_path, monkeypatch, kind):
    monkeypatch.setattr(onnx_path, "export_onnx", _no_work)
    path = str(tmp_path) if kind == "directory" else str(tmp_path / "caches") + "/"
    with pytest.raises(ValueError, match="directory|separator"):
        pipeline.compile(tiny_module, (None,), timing_cache=path, output_dir=tmp_path / "o", cache=False)


def test_unwritable_location_is_an_os_error(tiny_onnx, tmp_path, monkeypatch):
    monkeypatch.setattr(onnx_path, "build_engine", _no_work)
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    with pytest.raises(OSError, match="cannot be created"):
        pipeline.compile(tiny_onnx, timing_cache=blocker / "timing.cache", output_dir=tmp_path / "o", cache=False)


def test_unwritable_file_is_an_os_error(tmp_path):
    locked = tmp_path / "ro"
    locked.mkdir()
    (locked / "timing.cache").write_bytes(b"")
    (locked / "timing.cache").chmod(0o000)
    import os

    if os.access(locked / "timing.cache", os.W_OK):
        pytest.skip("running as root: permission bits do not stop writes")
    with pytest.raises(OSError, match="cannot be written"):
        check_timing_cache_path(locked / "timing.cache")


@pytest.mark.slow
def test_rtx_ignores_the_timing_cache_and_says_so_once(tiny_onnx, tmp_path, monkeypatch, caplog):
    if not timing_cache.trt.info().is_rtx:
        pytest.skip("TensorRT-RTX behaviour")
    monkeypatch.setattr(timing_cache, "_said_ignored", False)
    for out in ("a", "b"):
        art = pipeline.compile(tiny_onnx, timing_cache=tmp_path / "t.cache", output_dir=tmp_path / out,
                               cache=False, progress=False)
        assert art.sidecar.builder.timing_cache is False
    said = [r for r in caplog.records if "timing_cache= is ignored" in r.getMessage()]
    assert len(said) == 1 and said[0].levelname == "WARNING"  # a warning line, once (issue 20: not silent)
    assert not (tmp_path / "t.cache").exists()


class FakeTrtTimingCache:
    """A double of ``ITimingCache``: a set of "layer:tactic" entries, serialized as text."""

    HEADER = b"FAKE-TIMING-CACHE\n"

    def __init__(self, entries=()):
        self.entries = set(entries)

    def queryKeys(self):  # noqa: N802 - TensorRT's name
        return sorted(self.entries)

    def combine(self, other, ignore_mismatch):
        self.entries |= other.entries
        return True

    def serialize(self):
        return self.HEADER + "\n".join(sorted(self.entries)).encode()


class FakeTrtBuilderConfig:
    """A double of the ``IBuilderConfig`` timing-cache calls; a build adds ``new`` to the attached cache."""

    def __init__(self, new=()):
        self.new = set(new)
        self.attached = None

    def create_timing_cache(self, data):
        if not data:
            return FakeTrtTimingCache()
        if not bytes(data).startswith(FakeTrtTimingCache.HEADER):
            return FakeTrtTimingCache()  # TensorRT logs "failed to deserialize" and returns an empty cache
        body = bytes(data)[len(FakeTrtTimingCache.HEADER):].decode()
        return FakeTrtTimingCache(e for e in body.split("\n") if e)

    def set_timing_cache(self, cache, ignore_mismatch):
        self.attached = cache

    def build(self):
        self.attached.entries |= self.new


@pytest.fixture
def full_tensorrt_cache(monkeypatch):
    monkeypatch.setattr(timing_cache, "timing_cache_supported", lambda: True)


def _session_build(path, new):
    cfg = FakeTrtBuilderConfig(new)
    with TimingCacheSession(path) as session:
        session.attach(cfg)
        cfg.build()
        session.save()
    return cfg


def test_timings_are_loaded_merged_and_written_back(tmp_path, full_tensorrt_cache):
    path = tmp_path / "t.cache"
    _session_build(path, {"conv:1"})
    cfg = _session_build(path, {"gemm:7"})
    assert cfg.attached.queryKeys() == ["conv:1", "gemm:7"]  # loaded the first build's timings
    assert path.read_bytes() == FakeTrtTimingCache.HEADER + b"conv:1\ngemm:7"


def test_timings_found_by_another_process_meanwhile_are_kept(tmp_path, full_tensorrt_cache):
    path = tmp_path / "t.cache"
    cfg = FakeTrtBuilderConfig({"mine:1"})
    with TimingCacheSession(path) as session:
        session.attach(cfg)
        path.write_bytes(FakeTrtTimingCache.HEADER + b"theirs:2")  # another build saved in between
        cfg.build()
        session.save()
    assert path.read_bytes() == FakeTrtTimingCache.HEADER + b"mine:1\ntheirs:2"


def test_corrupt_cache_is_logged_and_replaced(tmp_path, full_tensorrt_cache, caplog):
    path = tmp_path / "t.cache"
    path.write_bytes(b"\x00garbage from another TensorRT")
    with caplog.at_level(logging.WARNING):
        _session_build(path, {"conv:1"})
    assert "corrupt or from another TensorRT version" in caplog.text
    assert path.read_bytes() == FakeTrtTimingCache.HEADER + b"conv:1"
