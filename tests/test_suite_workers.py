"""The suite's promise to itself: under ``make test``'s ``-n 2 --dist loadgroup`` the tests of one group run in one
worker (tests/support/worker_groups.py). A matrix row (tests/matrix) or a module fixture (a tritonserver, the
hardening table, the conformance results) in two workers is run twice. Two ways it broke silently: pytest 9.2 with
pytest-xdist 3.8 split every group (pytest-xdist issue 1386), and a group added by a hook that ran after xdist's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SUPPORT = Path(__file__).resolve().parent / "support"

CONFTEST = f'''
import sys
sys.path.insert(0, {str(SUPPORT)!r})
from worker_groups import WorkerGroups

def pytest_configure(config):
    config.pluginmanager.register(WorkerGroups(), "worker-groups")
'''

RECORD = '''
import os

def record(case):
    with open(os.environ["WHERE"], "a") as out:
        out.write(f"{case} {os.environ['PYTEST_XDIST_WORKER']}\\n")
'''

MARKED = RECORD + '''
import pytest

# a a b b a a b b: any split by position, in runs or in turns, mixes the groups; only grouping keeps them apart
@pytest.mark.parametrize("case", [pytest.param(f"{g}-{i}", marks=pytest.mark.xdist_group(f"group{g}"))
                                  for pair in (0, 2) for g in "ab" for i in (pair, pair + 1)])
def test_case(case):
    record(case)
'''

MODULE_FIXTURE = RECORD + '''
import pytest

@pytest.fixture(scope="module")
def shared():
    return object()

@pytest.mark.parametrize("i", range(4))
def test_case(shared, i):
    record(f"{__name__}-{i}")
'''


def test_a_group_and_a_module_fixture_each_run_in_one_worker(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_marked.py").write_text(MARKED)
    for name in ("test_mod_c", "test_mod_d"):
        (tmp_path / f"{name}.py").write_text(MODULE_FIXTURE)
    where = tmp_path / "where.txt"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV", "TRTFORGE_SUITE"))}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist",
                           "loadgroup"], cwd=tmp_path, capture_output=True, text=True,
                          env={**env, "WHERE": str(where)}, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    workers: dict[str, set[str]] = {}
    for line in where.read_text().splitlines():
        case, worker = line.split()
        workers.setdefault(case.rsplit("-", 1)[0], set()).add(worker)
    assert sorted(workers) == ["a", "b", "test_mod_c", "test_mod_d"], workers
    assert all(len(w) == 1 for w in workers.values()), f"a group ran in several workers: {workers}"
