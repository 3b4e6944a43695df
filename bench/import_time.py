"""Start-up cost of ``trtforge``: ``trtforge --help``, ``import trtforge`` and ``trtforge.load``, against
``python -c pass`` and ``import torch``, measured side by side in one run (fresh interpreters, median).

    python bench/import_time.py            # about 30 s on 2 cores
    python bench/import_time.py --runs 21 --json import_time.json

Target: ``trtforge --help`` ≤ 0.3 s. Results: docs/benchmarks.md ("Import time").
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
#: label → the ``python -c`` program it times.
PROGRAMS: dict[str, str] = {
    "python -c pass": "pass",
    "import trtforge": "import trtforge",
    "trtforge.load (import)": "import trtforge; trtforge.load",
    "trtforge --help": "import sys; sys.argv = ['trtforge', '--help']\nfrom trtforge.cli import app\n"
                       "try:\n    app()\nexcept SystemExit:\n    pass",
    "import torch (for scale)": "import torch",
}


def time_program(code: str, runs: int) -> list[float]:
    """Wall seconds of ``runs`` fresh interpreters running ``code`` (output discarded)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "100"}
    seconds = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], env=env, check=True, stdout=subprocess.DEVNULL)
        seconds.append(time.perf_counter() - start)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=11)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    # Interleaved rounds, so a busy machine slows every program alike.
    times: dict[str, list[float]] = {label: [] for label in PROGRAMS}
    for _ in range(args.runs):
        for label, code in PROGRAMS.items():
            times[label] += time_program(code, 1)
    base = statistics.median(times["python -c pass"])
    table = Table(title=f"start-up, median of {args.runs} fresh interpreters ({platform.node()}, {os.cpu_count()} CPUs)")
    for column in ("program", "median s", "min s", "minus python -c pass"):
        table.add_column(column)
    rows = []
    for label, values in times.items():
        median = statistics.median(values)
        rows.append({"program": label, "median_s": median, "min_s": min(values), "over_python_s": median - base})
        table.add_row(label, f"{median:.3f}", f"{min(values):.3f}", f"{median - base:+.3f}")
    Console().print(table)
    if args.json:
        args.json.write_text(json.dumps({"python": sys.version, "runs": args.runs, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
