"""The CLI over a table of bad inputs and faults (tests/hardening/cases.py).

Every case asserts the promises of docs/reliability.md:
- one line on stderr, exit 2 (bad input) or 1 (a failed check, a full disk, Ctrl-C);
- no traceback;
- no file left behind that trtforge did not finish: the case's folder is byte for byte what it was,
  and no temp file lies anywhere under it (the engine cache included);
- the same command (or the corrected one) succeeds once the cause is removed.

Each case runs in its own folder, with its own ``$TMPDIR`` inside it (a temporary folder left behind changes
the snapshot). The commands run in the test process (``harness.run_cli_in_process``: a CLI process pays 3 to
7 CPU s of start-up), one at a time on the main thread, since the environment, the working folder and the
signal handlers are the process's. A case whose failing command must be a process (``cases.PROCESS_CASES``:
a real SIGINT or SIGTERM arrives at it) runs that command as a subprocess; those run in parallel threads
meanwhile, from an environment copied before any in-process command set its own, and their fixed commands
then run in process. The whole table runs the first time a test asks for an outcome.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from cases import CASES, PROCESS_CASES, Case, Ctx
from cli_in_process import Done
from harness import can_mount_tmpfs, error_lines, run_cli, run_cli_in_process, snapshot

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
    left_behind: list[str]


@dataclass
class Failed:
    """A case set up and its failing command run; its ``ctx.stack`` (a mounted tmpfs, say) is still open."""

    ctx: Ctx
    made: Case
    cache: Path
    done: Done | subprocess.CompletedProcess
    before: dict[str, str]
    after: dict[str, str]
    temp_files: list[str]
    left_behind: list[str]


def run_failing(name: str, inputs: dict[str, Path], root: Path, shared_cache: Path,
                base_env: Mapping[str, str]) -> Failed:
    """Set up case ``name`` in ``root/name`` and run its failing command: in process, or for a case of
    ``PROCESS_CASES`` as a subprocess started from ``base_env`` (safe in a thread)."""
    tmp = root / name
    tmp.mkdir()
    ctx = Ctx(tmp, inputs)
    with ctx.stack:  # closed here only if the set-up or the command raises; else by run_fixed
        made = CASES[name](ctx)
        if (made.sigint_at is not None) != (name in PROCESS_CASES):
            raise AssertionError(f"case {name}: a case that sends a signal (sigint_at) is one of cases.PROCESS_CASES, "
                                 "and only such a case")
        cache = made.cache or shared_cache
        skip = [cache.relative_to(tmp).as_posix()] if cache.is_relative_to(tmp) else []
        skip.append("tmpdir/.ses")  # onnxruntime's telemetry id, written into $TMPDIR on import and kept (not ours)
        (tmp / "tmpdir").mkdir()  # the command's $TMPDIR: a temporary folder left behind changes the snapshot
        before = snapshot(tmp, skip)
        if made.sigint_at:
            done = run_cli(made.argv, cache_dir=cache, cwd=tmp, sigint_at=made.sigint_at, tmpdir=tmp / "tmpdir",
                           base_env=base_env)
        else:
            done = run_cli_in_process(made.argv, cache_dir=cache, cwd=tmp, tmpdir=tmp / "tmpdir")
        after = snapshot(tmp, skip)
        temp_files = [p.relative_to(tmp).as_posix() for p in tmp.rglob("*") if p.name.endswith(".tmp")]
        left_behind = [p for p in made.absent if (tmp / p).exists()]
        ctx.stack = ctx.stack.pop_all()  # kept open for the fixed command
    return Failed(ctx, made, cache, done, before, after, temp_files, left_behind)


def run_fixed(failed: Failed) -> Outcome:
    """Remove the cause, run the fixed command in process, close the case's stack."""
    made = failed.made
    with failed.ctx.stack:
        argv = (made.fix() if made.fix else None) or made.argv
        fixed = run_cli_in_process(argv, cache_dir=failed.cache, cwd=failed.ctx.tmp)
    return Outcome(failed.done.returncode, failed.done.stdout, failed.done.stderr, made.expect, made.match,
                   failed.before, failed.after, failed.temp_files, fixed.returncode, fixed.stdout + fixed.stderr,
                   failed.left_behind)


def selected_cases(request: pytest.FixtureRequest) -> list[str]:
    """The cases of the ``test_case`` items this session runs (``-k sigint`` runs the SIGINT cases alone)."""
    chosen = {item.callspec.params["name"] for item in request.session.items
              if item.module is request.module and hasattr(item, "callspec") and "name" in item.callspec.params}
    return [n for n in CASES if n in chosen]


@pytest.fixture(scope="module")
def outcomes(request, hardening_inputs, tmp_path_factory) -> dict[str, Outcome | BaseException]:
    root = tmp_path_factory.mktemp("hardening_cases")
    names = [n for n in selected_cases(request) if n not in TMPFS_CASES or can_mount_tmpfs(root)]
    shared = root / "shared_cache"
    shutil.copytree(hardening_inputs["cache"], shared)  # the fixed builds are mostly cache hits
    failing = functools.partial(run_failing, inputs=hardening_inputs, root=root, shared_cache=shared,
                                base_env=dict(os.environ))  # copied before an in-process command sets its own
    found: dict[str, Outcome | BaseException] = {}
    with ThreadPoolExecutor(max_workers=max(4, 2 * (os.cpu_count() or 1))) as pool:
        signalled = {n: pool.submit(failing, n) for n in names if n in PROCESS_CASES}
        for name in (n for n in names if n not in PROCESS_CASES):  # the main thread, one at a time
            found[name] = _attempt(lambda name=name: run_fixed(failing(name)))
        for name, future in signalled.items():
            found[name] = _attempt(lambda future=future: run_fixed(future.result()))
    return {n: found[n] for n in names}


def _attempt(step: Callable[[], Outcome]) -> Outcome | BaseException:
    """A case's outcome, or the error its set-up or run raised (reported by that case's test alone)."""
    try:
        return step()
    except Exception as exc:  # noqa: BLE001 - one broken case must not hide the others' results
        return exc


def test_the_table_is_large_enough():
    assert len(CASES) >= 60
    kinds = {n.split("_")[0] for n in CASES}
    assert {"sigint", "sidecar", "model", "output", "batch", "calib", "engine"} <= kinds


@pytest.mark.slow  # every case is two CLI commands, most of them a real build
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
    assert out.left_behind == [], f"left behind after the failure: {out.left_behind}"
    assert out.fixed_rc == 0, f"the command still fails once the cause is gone:\n{out.fixed_output}"
