"""What each test costs: wall and CPU seconds (its own process's and its finished subprocesses'), per test and
per folder, so docs/DEVELOPING.md's "The suite's cost" table comes from a run rather than a guess.

Pytest side (a plugin, registered by tests/conftest.py): ``TRTFORGE_SUITE_COST=DIR pytest`` makes every process of
the run (each xdist worker; an environment variable reaches them all, a conftest's option does not) write ``DIR/cost-<worker>.jsonl``, a line per test: ``{"test", "wall", "cpu"}``, setup,
call and teardown summed. CPU is ``resource.getrusage`` of the process and of its waited-for children, so a
test that starts a CLI process or a tritonserver is charged for it.

Report side: ``python tests/support/suite_cost.py DIR`` prints the per-folder table (markdown) and the
twenty most expensive tests.

Example:
    $ TRTFORGE_SUITE_COST=/tmp/cost python -m pytest -n 2 --dist loadgroup && python tests/support/suite_cost.py /tmp/cost
"""

from __future__ import annotations

import collections
import json
import os
import resource
import sys
import time
from pathlib import Path

import pytest


def cpu_seconds() -> float:
    """User + system CPU seconds of this process, of the children it has waited for, and of the children still
    running (a long-lived helper such as tests/docs' page runner; ``live_children_cpu``)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime + live_children_cpu()


def live_children_cpu() -> float:
    """CPU seconds so far of this process's running children and of the children they have waited for (Linux's
    /proc; 0 elsewhere). Once such a child is waited for, ``RUSAGE_CHILDREN`` holds the same seconds."""
    total = 0
    for task in Path("/proc/self/task").glob("*/children"):
        for pid in task.read_text().split():
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:  # it ended meanwhile
                continue
            total += sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
    return total / os.sysconf("SC_CLK_TCK")


class SuiteCost:
    """Pytest plugin: a line per test in ``DIR/cost-<worker>.jsonl`` (see the module docstring)."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / f"cost-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}.jsonl"
        self.path.write_text("")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        wall, cpu = time.perf_counter(), cpu_seconds()
        yield
        line = {"test": item.nodeid.split("@")[0], "wall": round(time.perf_counter() - wall, 3),
                "cpu": round(cpu_seconds() - cpu, 3)}
        with self.path.open("a") as out:
            out.write(json.dumps(line) + "\n")


def folder_of(test: str) -> str:
    """``tests/serve/test_x.py::t`` → ``tests/serve``; a test module at the top → its own file."""
    parts = test.split("::")[0].split("/")
    return "/".join(parts[:2]) if len(parts) > 2 else "/".join(parts)


def report(folder: Path) -> str:
    """The per-folder table and the most expensive tests, as markdown."""
    rows = [json.loads(line) for path in sorted(folder.glob("cost-*.jsonl")) for line in path.read_text().splitlines()]
    wall: dict[str, float] = collections.Counter()
    cpu: dict[str, float] = collections.Counter()
    count: dict[str, int] = collections.Counter()
    for row in rows:
        key = folder_of(row["test"])
        wall[key] += row["wall"]
        cpu[key] += row["cpu"]
        count[key] += 1
    lines = ["| folder | tests | worker s | CPU s |", "|---|---:|---:|---:|"]
    lines += [f"| {k} | {count[k]} | {wall[k]:.0f} | {cpu[k]:.0f} |" for k in sorted(wall, key=wall.get, reverse=True)]
    lines.append(f"| **all** | {len(rows)} | {sum(wall.values()):.0f} | {sum(cpu.values()):.0f} |")
    lines += ["", "| most expensive tests | worker s | CPU s |", "|---|---:|---:|"]
    lines += [f"| `{r['test']}` | {r['wall']:.1f} | {r['cpu']:.1f} |"
              for r in sorted(rows, key=lambda r: r["wall"], reverse=True)[:20]]
    return "\n".join(lines)


if __name__ == "__main__":
    print(report(Path(sys.argv[1])))
