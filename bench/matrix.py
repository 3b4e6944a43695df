"""The command × model matrix (tests/matrix) as a table: writes docs/conformance.md's "Foreign models" section.

Runs ``tests/matrix/driver.py``'s rows in this process, one after another, as CI's test does (one shared
engine cache, one import of torch and TensorRT), or reads the rows a run left (``--rows DIR``), prints a
rich table and replaces the section between the markers in docs/conformance.md, with the command, machine,
date and each row's CPU seconds.

Run:
    $ python bench/matrix.py                                  # every row
    $ python bench/matrix.py --models vit/dynamo,ppocr_rec    # some of them
    $ python bench/matrix.py --rows /tmp/rows --no-run        # rebuild the table from rows already written
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
MATRIX = ROOT / "tests" / "matrix"
sys.path[:0] = [str(MATRIX), str(ROOT / "tests" / "support")]

import matrix_models  # noqa: E402

PAGE = ROOT / "docs" / "conformance.md"
BEGIN, END = "<!-- matrix:begin -->", "<!-- matrix:end -->"
SYMBOL = {"pass": "pass", "refused": "refused", "n/a": "-", "traceback": "**TRACEBACK**",
          "self-compare": "**SELF-COMPARE**", "messy": "**MESSY**", "wrong": "**WRONG**"}


#: What ``make test`` runs of the matrix (``driver.row_cells``), said on the page above the table.
SCOPE = (
    "**What `make test` runs** (since session 18): every command the docs show, on every architecture's "
    "first file (dynamo; TorchScript for the three models the dynamo exporter cannot export, "
    "`DYNAMO_EXPORT_FAILS`), each from another folder: `inspect`, `build` at FP32, FP16, BF16, INT8, FP8 "
    "and the weight-only INT8 and INT4 (without data), `check` of each, `compare` (and `--layerwise` at "
    "FP16 and BF16), `debug precision`, `export triton` (both backends), `build --dynamic-batch` and its "
    "`check` at batches of 2 and 1, `quantize sensitivity`, `bench` on the onnxruntime route, and the "
    "direct path (`coverage`, `build --path direct`) once per model. Every second file gets the short set "
    "(`inspect onnx`, `build fp16`, `inspect fp16`, `check fp16`, `compare onnx-vs-fp16`, `compare "
    "--layerwise fp16`, `export triton tensorrt`). `serve` (a real tritonserver, one request, its answer "
    "against the same graph run in process) runs on twelve first files, one per kind of input and output "
    "(`driver.SERVE_ROWS`: images, dynamic dims, token ids, audio frames, detector heads, multimodal, "
    "int64 and bool inputs, a scalar output, an input that is also an output, no input): a server's start "
    "and stop cost about 8 s a row. `make test-matrix` (`TRTFORGE_MATRIX=full`, and `bench/matrix.py`, "
    "which made the table below) serves every first file too."
)


def run_rows(models: list[str], rows: Path) -> None:
    """Each row through ``driver.run`` in this process, its record written to ``rows/ROW.json`` as it ends."""
    import warnings

    import driver
    from cli_in_process import environment

    cache = Path(tempfile.mkdtemp(prefix="trtforge-matrix-cache-"))
    # serve on every first file too (make test serves driver.SERVE_ROWS)
    full = {"TRTFORGE_MATRIX": os.environ.get("TRTFORGE_MATRIX", "full")}
    with environment({"TRTFORGE_CACHE_DIR": str(cache), "COLUMNS": "200", **full}), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for model in models:
            work = Path(tempfile.mkdtemp(prefix=f"trtforge-matrix-{model.replace('/', '-')}-"))
            record = driver.run(model, work)
            (rows / f"{model.replace('/', '-')}.json").write_text(json.dumps(record, indent=1))
            print(f"{model}: {record['cpu_seconds']:.0f} CPU s", flush=True)


def table_markdown(records: list[dict]) -> tuple[str, Table]:
    cells = list(dict.fromkeys(c["cell"] for r in records for c in r["cells"]))
    head = "| row | CPU s | " + " | ".join(cells) + " |"
    lines = [head, "|" + "---|" * (len(cells) + 2)]
    rich_table = Table(title="command × model matrix")
    rich_table.add_column("row")
    rich_table.add_column("CPU s", justify="right")
    for cell in cells:
        rich_table.add_column(cell)
    problems = []
    for record in records:
        got = {c["cell"]: c for c in record["cells"]}
        marks = [SYMBOL[got[c]["outcome"]] if c in got else "" for c in cells]
        cpu = f"{record.get('cpu_seconds', 0):.0f}"
        lines.append(f"| {record['model']} | {cpu} | " + " | ".join(marks) + " |")
        rich_table.add_row(record["model"], cpu, *marks)
        fileless = [c for c in record["cells"] if c["outcome"] == "n/a" and not c["argv"]]  # no ONNX file
        problems += [f"| {record['model']} | every ONNX cell | n/a | {fileless[0]['line'].replace('|', '/')} |"
                     for _ in fileless[:1]]
        problems += [f"| {record['model']} | {c['cell']} | {c['outcome']} | {c['line'].replace('|', '/')} |"
                     for c in record["cells"] if c["outcome"] in ("refused", "traceback", "self-compare", "messy", "wrong")]
    total = sum(r.get("cpu_seconds", 0) for r in records)
    text = "\n".join(lines) + f"\n\n{len(records)} rows, {total:.0f} CPU s in all (the rows' driver runs, in one process)."
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
    section = (f"{BEGIN}\n## Foreign models: every command (issues 20 and 35)\n\n"
               "Every user-facing command on models nobody in this project wrote (tests/matrix, the rows run in one "
               "process): PP-OCRv4 det/rec from the `rapidocr_onnxruntime` wheel; transformers vision, detection, "
               "depth, multimodal, text, audio and video encoders from tiny configs with random weights, and two "
               "plain-PyTorch conv nets, each exported by torch's default dynamo exporter (`NAME/dynamo`: "
               "`NAME.onnx.data` beside the file) and by TorchScript (`NAME/torchscript`); ultralytics YOLO files "
               "when `make setup` wrote them; odd hand-made graphs. Every command runs from another folder than "
               "the model file's, which it names by a relative path; builds take `--opt-level 0`. The direct path "
               "(`coverage`, `build --path direct`) runs once per model, on its torchscript row. A cell passes, "
               "or fails with one `error:` line and exit 1/2 (`refused`); `-`: not run because the build it needs "
               "was refused, or there is no ONNX file (the exporter's refusal is listed below). A traceback, a "
               "`compare` of a graph with itself, or a messy failure fails CI (tests/matrix/test_matrix.py's "
               "`KNOWN` lists the ones being fixed).\n\n"
               f"{SCOPE}\n\n"
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
    parser.add_argument("--models", default=",".join(matrix_models.ROWS))
    parser.add_argument("--rows", type=Path, default=None, help="folder for the per-model JSON rows")
    parser.add_argument("--no-run", action="store_true", help="only read the rows in --rows")
    args = parser.parse_args()
    rows = args.rows or Path(tempfile.mkdtemp(prefix="trtforge-matrix-rows-"))
    rows.mkdir(parents=True, exist_ok=True)
    models = [m for m in args.models.split(",") if m]
    start = time.perf_counter()
    if not args.no_run:
        run_rows(models, rows)
    files = [rows / f"{m.replace('/', '-')}.json" for m in models]
    records = [json.loads(f.read_text()) for f in files if f.is_file()]
    text, rich_table = table_markdown(records)
    Console(width=250).print(rich_table)
    write_page(text, sys.argv[1:], None if args.no_run else time.perf_counter() - start)
    print(f"wrote {PAGE}")


if __name__ == "__main__":
    main()
