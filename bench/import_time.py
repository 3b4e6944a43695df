"""Start-up cost: wall time of fresh Python processes that import trtforge, against ``python -c pass``.

Every command runs in a new subprocess (same interpreter, same environment), ``--repeats`` times,
interleaved: each round runs every command once, in a rotating order, so drift on a shared machine
hits all of them alike. Reported per command: median and min wall time, and the median's
difference to and ratio over ``python -c pass`` measured in the same rounds.

Commands:

* ``python -c pass``                          the interpreter alone (the baseline);
* ``python -c "import trtforge"``             the package;
* ``python -c "import trtforge; trtforge.load"``  the runtime entry point (must not pull the compile stack);
* ``python -c "import trtforge.cli"``         the CLI module;
* ``python -m trtforge.cli --help``           the ``trtforge --help`` screen;
* ``trtforge --help``                         the console script beside ``sys.executable``, when installed.

Target (issue 10): ``trtforge --help`` ≤ 0.3 s (median wall time).

Example:
    PYTHONPATH=. python bench/import_time.py --repeats 20 --json docs/bench/import_time.json
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
from dataclasses import asdict, dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

TARGET_S = 0.3
BASELINE = "python -c pass"
HELP_ROWS = ("trtforge --help", "python -m trtforge.cli --help")

console = Console()


@dataclass(frozen=True)
class ImportTimeRow:
    """Wall-time statistics of one command over the interleaved rounds (seconds)."""

    name: str
    argv: tuple[str, ...]
    median_s: float
    min_s: float
    max_s: float
    repeats: int
    minus_baseline_s: float
    over_baseline: float


def commands() -> dict[str, list[str]]:
    """Name → argv of every command timed; the console script only when it sits beside ``sys.executable``.

    Example:
        >>> commands()["python -c pass"][1:]
        ['-c', 'pass']
    """
    py = sys.executable
    table = {
        BASELINE: [py, "-c", "pass"],
        'python -c "import trtforge"': [py, "-c", "import trtforge"],
        'python -c "import trtforge; trtforge.load"': [py, "-c", "import trtforge; trtforge.load"],
        'python -c "import trtforge.cli"': [py, "-c", "import trtforge.cli"],
        "python -m trtforge.cli --help": [py, "-m", "trtforge.cli", "--help"],
    }
    script = Path(sys.executable).parent / ("trtforge.exe" if os.name == "nt" else "trtforge")
    if script.is_file():
        table["trtforge --help"] = [str(script), "--help"]
    return table


def wall_time(argv: list[str]) -> float:
    """Seconds from spawn to exit of one fresh process; a failing command is an error, not a number."""
    start = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        tail = done.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["(no stderr)"]
        raise SystemExit(f"{' '.join(argv)} exited with {done.returncode}: {tail[0]}")
    return elapsed


def measure(table: dict[str, list[str]], repeats: int, warmup: int) -> dict[str, list[float]]:
    """Run every command ``warmup`` rounds (discarded), then ``repeats`` rounds in a rotating order."""
    names = list(table)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for round_index in range(warmup + repeats):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            seconds = wall_time(table[name])
            if round_index >= warmup:
                samples[name].append(seconds)
    return samples


def summarise(table: dict[str, list[str]], samples: dict[str, list[float]]) -> list[ImportTimeRow]:
    """Median/min per command, and the median's difference to and ratio over the baseline's median."""
    base = statistics.median(samples[BASELINE])
    rows = []
    for name, values in samples.items():
        median = statistics.median(values)
        rows.append(ImportTimeRow(name=name, argv=tuple(table[name]), median_s=median, min_s=min(values),
                                  max_s=max(values), repeats=len(values), minus_baseline_s=median - base,
                                  over_baseline=median / base))
    return rows


def target(rows: list[ImportTimeRow]) -> dict:
    """The issue's target, read on the console script's row when installed, else on ``python -m``."""
    by_name = {row.name: row for row in rows}
    row = next(by_name[name] for name in HELP_ROWS if name in by_name)
    return {"target": f"{row.name} median <= {TARGET_S} s", "command": row.name, "value_s": row.median_s,
            "ok": row.median_s <= TARGET_S}


def print_table(rows: list[ImportTimeRow], goal: dict) -> None:
    table = Table(title="fresh-process wall time (interleaved rounds)")
    for column in ("command", "median s", "min s", "− pass, s", "× pass"):
        table.add_column(column, justify="left" if column == "command" else "right")
    for row in rows:
        table.add_row(row.name, f"{row.median_s:.3f}", f"{row.min_s:.3f}", f"{row.minus_baseline_s:+.3f}",
                      f"{row.over_baseline:.2f}")
    console.print(table)
    verdict = "[green]met[/]" if goal["ok"] else "[red]not met[/]"
    console.print(f"target: {goal['target']}: {goal['value_s']:.3f} s, {verdict}")


def machine() -> dict:
    return {"python": platform.python_version(), "executable": sys.executable, "platform": platform.platform(),
            "cpu": platform.machine(), "cpu_count": os.cpu_count(),
            "date_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20, help="timed rounds (each runs every command once)")
    parser.add_argument("--warmup", type=int, default=2, help="rounds run first and discarded (file cache)")
    parser.add_argument("--json", type=Path, help="write every sample and the summary here")
    args = parser.parse_args()
    if args.repeats < 1 or args.warmup < 0:
        parser.error("--repeats must be at least 1 and --warmup at least 0")
    table = commands()
    samples = measure(table, args.repeats, args.warmup)
    rows = summarise(table, samples)
    goal = target(rows)
    print_table(rows, goal)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        record = {"machine": machine(), "command": " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]),
                  "repeats": args.repeats, "warmup": args.warmup, "pythonpath": os.environ.get("PYTHONPATH"),
                  "rows": [asdict(row) for row in rows], "samples_s": samples, "target": goal}
        args.json.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
