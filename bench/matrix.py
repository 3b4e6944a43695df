"""The command × model matrix (tests/matrix) as a table: writes docs/conformance.md's "Foreign models" section.

Runs ``tests/matrix/driver.py`` once per model (a process each, as CI does), or reads the rows a run
left (``--rows DIR``), prints a rich table and replaces the section between the markers in
docs/conformance.md, with the command, machine and date.

Run:
    $ python bench/matrix.py                          # every model (about 10 minutes on 2 idle cores)
    $ python bench/matrix.py --models vit,ppocr_rec   # some of them (the page keeps its other rows)
    $ python bench/matrix.py --rows /tmp/rows --no-run # rebuild the table from rows already written
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
MATRIX = ROOT / "tests" / "matrix"
sys.path.insert(0, str(MATRIX))

import matrix_models  # noqa: E402

PAGE = ROOT / "docs" / "conformance.md"
BEGIN, END = "<!-- matrix:begin -->", "<!-- matrix:end -->"
SYMBOL = {"pass": "pass", "refused": "refused", "n/a": "-", "traceback": "**TRACEBACK**",
          "self-compare": "**SELF-COMPARE**", "messy": "**MESSY**"}


def run_rows(models: list[str], rows: Path) -> None:
    cache = Path(tempfile.mkdtemp(prefix="trtforge-matrix-cache-"))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(MATRIX)]), TRTFORGE_CACHE_DIR=str(cache),
               COLUMNS="200", PYTHONWARNINGS="ignore")
    for model in models:
        start = time.perf_counter()
        work = Path(tempfile.mkdtemp(prefix=f"trtforge-matrix-{model}-"))
        subprocess.run([sys.executable, str(MATRIX / "driver.py"), model, str(work), str(rows / f"{model}.json")],
                       env=env, check=True)
        print(f"{model}: {time.perf_counter() - start:.0f} s", flush=True)


def table_markdown(records: list[dict]) -> tuple[str, Table]:
    cells = list(dict.fromkeys(c["cell"] for r in records for c in r["cells"]))
    head = "| model | " + " | ".join(cells) + " |"
    lines = [head, "|" + "---|" * (len(cells) + 1)]
    rich_table = Table(title="command × model matrix")
    rich_table.add_column("model")
    for cell in cells:
        rich_table.add_column(cell)
    problems = []
    for record in records:
        got = {c["cell"]: c for c in record["cells"]}
        marks = [SYMBOL[got[c]["outcome"]] if c in got else "" for c in cells]
        lines.append(f"| {record['model']} | " + " | ".join(marks) + " |")
        rich_table.add_row(record["model"], *marks)
        problems += [f"| {record['model']} | {c['cell']} | {c['outcome']} | {c['line'].replace('|', '/')} |"
                     for c in record["cells"] if c["outcome"] in ("refused", "traceback", "self-compare", "messy")]
    text = "\n".join(lines)
    if problems:
        text += "\n\nEvery cell that did not pass, with its one line:\n\n| model | cell | outcome | line |\n|---|---|---|---|\n"
        text += "\n".join(problems)
    return text, rich_table


def write_page(text: str, argv: list[str], seconds: float | None) -> None:
    import onnxruntime

    from trtforge.core import trt

    info = trt.info()
    when = dt.date.today().isoformat()
    took = f" · {seconds:.0f} s" if seconds else ""
    section = (f"{BEGIN}\n## Foreign models: every command (issue 20)\n\n"
               "Every user-facing command on models nobody in this project wrote (tests/matrix, one process per "
               "model): PP-OCRv4 det/rec from the `rapidocr_onnxruntime` wheel, transformers architectures from "
               "small configs with random weights, and odd hand-made graphs. A cell passes, or fails with one "
               "`error:` line and exit 1/2 (`refused`); `-`: not run because the build it needs was refused. "
               "A traceback, a `compare` of a graph with itself, or a messy failure fails CI.\n\n"
               f"Command: `python bench/matrix.py {' '.join(argv)}`".rstrip() + f" · {info.flavour} {info.version}, "
               f"onnxruntime {onnxruntime.__version__} · {platform.machine()} CPU, no GPU · {when}{took}\n\n"
               f"{text}\n{END}")
    page = PAGE.read_text(encoding="utf-8")
    if BEGIN in page:
        page = page[:page.index(BEGIN)] + section + page[page.index(END) + len(END):]
    else:
        page = page.rstrip("\n") + "\n\n" + section + "\n"
    from trtforge.core.atomic import atomic_write_bytes

    atomic_write_bytes(PAGE, page.encode("utf-8"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(matrix_models.MODELS))
    parser.add_argument("--rows", type=Path, default=None, help="folder for the per-model JSON rows")
    parser.add_argument("--no-run", action="store_true", help="only read the rows in --rows")
    args = parser.parse_args()
    rows = args.rows or Path(tempfile.mkdtemp(prefix="trtforge-matrix-rows-"))
    rows.mkdir(parents=True, exist_ok=True)
    models = [m for m in args.models.split(",") if m]
    start = time.perf_counter()
    if not args.no_run:
        run_rows(models, rows)
    records = [json.loads((rows / f"{m}.json").read_text()) for m in models if (rows / f"{m}.json").is_file()]
    text, rich_table = table_markdown(records)
    Console(width=250).print(rich_table)
    write_page(text, sys.argv[1:], None if args.no_run else time.perf_counter() - start)
    print(f"wrote {PAGE}")


if __name__ == "__main__":
    main()
