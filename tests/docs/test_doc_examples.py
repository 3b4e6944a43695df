"""Every fenced example in README.md and docs/*.md runs in CI, or is marked as not running here (issue 20).

``doc_examples.py`` says how fences are read and marked (also docs/DEVELOPING.md, "Doc examples").
Each page runs in a fresh folder, in the test process's page runner (``run_page.py --serve``: one process runs
the pages one after the other, each with its own environment and namespace), with this checkout's ``trtforge``
first on PATH and the run's engine store (docs/engine-cache.md: a cache of its own); an example that raises or exits non-zero fails its page.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from doc_examples import ROOT, bash_steps, console_steps, examples, pages  # noqa: E402

RUNS = ("python", "bash", "console", "setup")


def _runnable(page: Path) -> list[dict]:
    out = []
    for e in examples(page):
        if e.kind in ("console", "bash") and e.skip is None:
            steps = console_steps(e.code) if e.kind == "console" else bash_steps(e.code)
            out.append({"id": e.id, "kind": e.kind, "steps": steps})
        elif e.kind in RUNS and e.skip is None:
            out.append({"id": e.id, "kind": e.kind, "code": e.code})
    return out


def _pages_with_examples() -> list:
    found = []
    for page in pages():
        try:
            runnable = [e for e in _runnable(page) if e["kind"] != "setup"]
        except ValueError:
            runnable = []  # test_every_fence_is_declared names the problem
        if runnable:
            found.append(pytest.param(page, id=page.relative_to(ROOT).as_posix(), marks=pytest.mark.slow))
    return found


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_fence_is_declared(page):
    """No bare fence, no marker without its reason: a fence either runs, or says why not, or is ```text."""
    examples(page)


OWN_CACHE = {"docs/engine-cache.md"}


@pytest.mark.parametrize("page", _pages_with_examples())
def test_page_examples_run(page, tmp_path, engine_store, page_runner):
    """Each page runs in a fresh folder (in the worker's ``page_runner`` process); its builds go through the run's engine store (pages build the same
    Lite0 and MiniLM requests as the rest of the suite), except the page about the cache, which shows misses."""
    (tmp_path / "examples.json").write_text(json.dumps(_runnable(page)))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    launcher = bin_dir / "trtforge"
    launcher.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m trtforge.cli "$@"\n')
    launcher.chmod(0o755)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(HERE)]), COLUMNS="160",
               PATH=os.pathsep.join([str(bin_dir), os.environ.get("PATH", "")]),
               TRTFORGE_CACHE_DIR=str(tmp_path / "cache" if page.relative_to(ROOT).as_posix() in OWN_CACHE else engine_store), MPLBACKEND="Agg")
    work = tmp_path / "work"
    work.mkdir()
    rc, output = page_runner.run({"page": str(tmp_path / "examples.json")}, env, work, tmp_path / "page.log")
    failed = [line for line in output.splitlines() if line.startswith("doc example failed")]
    assert rc == 0, (failed[0] if failed else f"exit {rc}") + "\n" + output[-6000:]


def _marked() -> list:
    found = []
    for page in pages():
        try:
            found += [pytest.param(e.skip, id=e.id) for e in examples(page) if e.skip]
        except ValueError:
            pass  # test_every_fence_is_declared names the problem
    return found


@pytest.mark.parametrize("reason", _marked())
def test_marked_example(reason):
    """Each example that does not run here, listed with its reason (``pytest -rs``)."""
    pytest.skip(reason)
