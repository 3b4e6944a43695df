"""``trtforge cache ls|prune|clear`` and ``trtforge build`` with the cache, through the real CLI."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from trtforge.cache.engine_cache import EngineCache
from trtforge.cli import app

pytestmark = pytest.mark.needs_trt

runner = CliRunner()


@pytest.mark.slow
def test_build_ls_prune_clear(tiny_onnx, tmp_path):
    cache = tmp_path / "cache"
    for precision in ("fp16", "fp32"):
        result = runner.invoke(app, ["build", str(tiny_onnx), "--precision", precision, "-o", str(tmp_path / "out"),
                                     "--cache-dir", str(cache), "--quiet"])
        assert result.exit_code == 0, result.output
    entries = EngineCache(cache).entries()
    assert [e.precision for e in entries] == ["fp32", "fp16"]  # most recently used first
    listed = runner.invoke(app, ["cache", "ls", "--cache-dir", str(cache)])
    assert listed.exit_code == 0, listed.output
    for entry in entries:
        assert entry.key[:16] in listed.output
    assert listed.output.count("tiny") >= 2 and "fp16" in listed.output and "last use" in listed.output

    pruned = runner.invoke(app, ["cache", "prune", "--cache-dir", str(cache), "--max-mb",
                                 str(entries[0].size / 1e6)])
    assert pruned.exit_code == 0 and "pruned 1 entry" in pruned.output
    assert [e.precision for e in EngineCache(cache).entries()] == ["fp32"]  # the least recently used went

    cleared = runner.invoke(app, ["cache", "clear", "--cache-dir", str(cache)])
    assert cleared.exit_code == 0 and "cleared 1 entries" in cleared.output
    assert EngineCache(cache).entries() == []


def test_cache_dir_that_is_a_file_is_one_clear_line(tmp_path):
    (tmp_path / "f").write_text("x")
    result = runner.invoke(app, ["cache", "ls", "--cache-dir", str(tmp_path / "f")])
    assert result.exit_code == 2 and "is a file; pass a folder" in result.output
