"""The CLI over a table of bad inputs and faults (tests/hardening/cases.py), each run as a subprocess.

Every case asserts the promises of docs/reliability.md:
- one line on stderr, exit 2 (bad input) or 1 (a failed check, a full disk, Ctrl-C);
- no traceback;
- no file left behind that trtforge did not finish: the case's folder is byte for byte what it was,
  and no temp file lies anywhere under it (the engine cache included);
- the same command (or the corrected one) succeeds once the cause is removed.

The cases run in parallel (each in its own folder) the first time a test asks for an outcome.
"""

from __future__ import annotations

import os
import re
import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from cases import CASES, Ctx
from harness import can_mount_tmpfs, error_lines, run_cli, snapshot

TMPFS_CASES = {"output_disk_full", "output_disk_full_after_engine"}


@dataclass
class Outcome:
    rc: int
    stdout: str
    stderr: str
    expect: int
    match: str
    before: dict[str, str]
    after: dict[str, str]
    temp_files: list[str]
    fixed_rc: int
    fixed_output: str


def run_case(name: str, inputs: dict[str, Path], root: Path, shared_cache: Path) -> Outcome:
    tmp = root / name
    tmp.mkdir()
    ctx = Ctx(tmp, inputs)
    with ctx.stack:
        made = CASES[name](ctx)
        cache = made.cache or shared_cache
        skip = [cache.relative_to(tmp).as_posix()] if cache.is_relative_to(tmp) else []
        (tmp / "tmpdir").mkdir()  # the command's $TMPDIR: a temporary folder left behind changes the snapshot
        before = snapshot(tmp, skip)
        failed = run_cli(made.argv, cache_dir=cache, cwd=tmp, sigint_at=made.sigint_at, tmpdir=tmp / "tmpdir")
        after = snapshot(tmp, skip)
        temp_files = [p.relative_to(tmp).as_posix() for p in tmp.rglob("*") if p.name.endswith(".tmp")]
        argv = (made.fix() if made.fix else None) or made.argv
        fixed = run_cli(argv, cache_dir=cache, cwd=tmp)
    return Outcome(failed.returncode, failed.stdout, failed.stderr, made.expect, made.match, before, after,
                   temp_files, fixed.returncode, fixed.stdout + fixed.stderr)


def selected_cases(request: pytest.FixtureRequest) -> list[str]:
    """The cases of the ``test_case`` items this session runs (``-k sigint`` runs the SIGINT cases alone)."""
    chosen = {item.callspec.params["name"] for item in request.session.items
              if item.module is request.module and hasattr(item, "callspec") and "name" in item.callspec.params}
    return [n for n in CASES if n in chosen]


@pytest.fixture(scope="module")
def outcomes(request, hardening_inputs, tmp_path_factory) -> dict[str, Outcome]:
    root = tmp_path_factory.mktemp("hardening_cases")
    names = [n for n in selected_cases(request) if n not in TMPFS_CASES or can_mount_tmpfs(root)]
    shared = root / "shared_cache"
    shutil.copytree(hardening_inputs["cache"], shared)  # the fixed builds are mostly cache hits
    with ThreadPoolExecutor(max_workers=max(4, 2 * (os.cpu_count() or 1))) as pool:
        futures = {n: pool.submit(run_case, n, hardening_inputs, root, shared) for n in names}
    return {n: _result(f) for n, f in futures.items()}


def _result(future) -> Outcome | BaseException:
    """A case's outcome, or the error its set-up raised (reported by that case's test alone)."""
    try:
        return future.result()
    except Exception as exc:  # noqa: BLE001 - one broken case must not hide the others' results
        return exc


def test_the_table_is_large_enough():
    assert len(CASES) >= 60
    kinds = {n.split("_")[0] for n in CASES}
    assert {"sigint", "sidecar", "model", "output", "batch", "calib", "engine"} <= kinds


@pytest.mark.slow  # every case is a CLI process, most of them a real build
@pytest.mark.needs_trt
@pytest.mark.parametrize("name", sorted(CASES))
def test_case(outcomes: dict[str, Outcome | BaseException], name: str) -> None:
    if name not in outcomes:
        pytest.skip("no tmpfs can be mounted here (needs root); the full-disk case needs one")
    out = outcomes[name]
    if isinstance(out, BaseException):
        raise out
    lines = error_lines(out.stderr)
    context = f"exit {out.rc}\nstderr:\n{out.stderr}\nstdout:\n{out.stdout[-2000:]}"
    assert out.rc == out.expect, context
    assert out.expect in (1, 2)
    assert "Traceback" not in out.stderr + out.stdout, context
    assert len(lines) == 1, context
    prefix = "error:"
    assert lines[0].startswith(prefix), context
    assert re.search(out.match, lines[0].removeprefix(prefix).strip()), context
    assert out.after == out.before, "files were left behind or changed: " + str(
        sorted(set(out.after.items()) ^ set(out.before.items())))
    assert out.temp_files == []
    assert out.fixed_rc == 0, f"the command still fails once the cause is gone:\n{out.fixed_output}"
