"""The suite's own promise to itself: under ``make test``'s ``-n 2 --dist loadgroup`` the tests of one group run in
one worker. A matrix row (tests/matrix) or a module fixture (a tritonserver, the hardening table) in two workers
is run twice; with pytest 9.2 and pytest-xdist 3.8 that happened silently (pytest-xdist issue 1386)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TWO_GROUPS = '''
import os
import pytest

# a a b b a a b b: any split by position, in runs or in turns, mixes the groups; only grouping keeps them apart
@pytest.mark.parametrize("case", [pytest.param(f"{g}-{i}", marks=pytest.mark.xdist_group(f"group{g}"))
                                  for pair in (0, 2) for g in "ab" for i in (pair, pair + 1)])
def test_case(case):
    with open(os.environ["WHERE"], "a") as out:
        out.write(f"{case} {os.environ['PYTEST_XDIST_WORKER']}\\n")
'''


def test_a_group_runs_in_one_worker(tmp_path: Path) -> None:
    (tmp_path / "test_groups.py").write_text(TWO_GROUPS)
    where = tmp_path / "where.txt"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV"))}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist",
                           "loadgroup", "test_groups.py"], cwd=tmp_path, capture_output=True, text=True,
                          env={**env, "WHERE": str(where)}, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    workers: dict[str, set[str]] = {}
    for line in where.read_text().splitlines():
        case, worker = line.split()
        workers.setdefault(case.split("-")[0], set()).add(worker)
    assert sorted(workers) == ["a", "b"]
    assert all(len(w) == 1 for w in workers.values()), f"a group ran in several workers: {workers}"
