"""One lease on a GPU machine: `trtforge doctor` and `trtforge check` on a Lite0 artifact, through the CLI.

What it answers (issue 11's device item): on this GPU, does `doctor` say whether the engine can run,
does `check` pass on the PyTorch CUDA-graph route, and does the TensorRT route fail with one clear
line (no traceback) where the installed TensorRT cannot run engines? It also re-times the route
table's batch-1 rows (`trtforge bench`) so the consolidated code is checked on the GPU.

Every step runs the real `trtforge` CLI in a subprocess, as a user would; the table shows each
step's exit code, its verdict line and its time. Writes ``--json PATH`` with every output.

Example (on the device, with the artifact and wheels carried; see docs/DEVELOPING.md):
    $ python bench/gpu_doctor_and_check.py --artifact .whl/p3/art/efficientnet_lite0_fp16.json --json $OUT/gpu_verify.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table


def run(args: list[str], timeout: float = 600.0) -> dict:
    """Run ``python -m trtforge.cli ARGS``; exit code, stdout, stderr, wall time, traceback seen."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "trtforge.cli", *args], capture_output=True, text=True,
                          timeout=timeout, check=False)
    return {"args": args, "rc": proc.returncode, "seconds": round(time.perf_counter() - start, 2),
            "stdout": proc.stdout[-6000:], "stderr": proc.stderr[-6000:],
            "traceback": "Traceback (most recent call last)" in proc.stderr}


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def steps(artifact: str, bench_json: str) -> list[tuple[str, list[str], str]]:
    """(name, CLI args, what a pass looks like)."""
    return [
        ("doctor", ["doctor"], "rc 0; GPUs, TensorRT flavours, ORT providers listed"),
        ("doctor ARTIFACT", ["doctor", artifact], "one line: can the engine run here, and if not, what to do"),
        ("check cuda_graph", ["check", artifact, "--route", "cuda_graph", "--samples", "32"], "rc 0: agrees"),
        ("check eager", ["check", artifact, "--route", "eager", "--samples", "32"], "rc 0: agrees"),
        ("check tensorrt", ["check", artifact, "--route", "tensorrt"], "rc 0 on a supported GPU; else rc 1/2, "
                                                                          "one line, no traceback"),
        ("bench b1", ["bench", artifact, "--route", "eager", "--route", "cuda_graph", "--batch", "1",
                      "--json", bench_json], "rc 0; e2e/model rows"),
        ("bench b1 unfused", ["bench", artifact, "--route", "cuda_graph", "--batch", "1",
                              "--no-compile-preprocessing", "--json", bench_json.replace(".json", "_unfused.json")],
         "rc 0; the same rows without the fused preprocessing"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--artifact", required=True, help="a Lite0 sidecar (.json) with its engine and ONNX beside it")
    parser.add_argument("--json", type=Path, required=True, help="write every step's output here")
    args = parser.parse_args()
    console = Console(width=160)
    bench_json = str(args.json.with_name("gpu_verify_bench.json"))
    results = []
    for name, cli, expected in steps(args.artifact, bench_json):
        result = run(cli)
        result.update(step=name, expected=expected)
        results.append(result)
        console.print(f"[bold]{name}[/] rc={result['rc']} {result['seconds']} s")
        console.print(result["stdout"][-3000:], markup=False, highlight=False)
        console.print(result["stderr"][-1500:], markup=False, highlight=False)
    table = Table(title=f"trtforge on the GPU ({dt.date.today()})")
    for column in ("step", "rc", "s", "traceback", "last line", "a pass looks like"):
        table.add_column(column, overflow="fold")
    for r in results:
        line = last_line(r["stderr"]) if r["rc"] and r["stderr"].strip() else last_line(r["stdout"])
        table.add_row(r["step"], str(r["rc"]), f"{r['seconds']:.1f}", "yes" if r["traceback"] else "no", line[:150],
                      r["expected"])
    console.print(table)
    args.json.write_text(json.dumps({"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                                     "python": sys.version, "steps": results}, indent=2))


if __name__ == "__main__":
    main()
