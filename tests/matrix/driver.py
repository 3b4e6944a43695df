"""Every user-facing command on one foreign model, in one process: the matrix's row for that model.

Run ``python tests/matrix/driver.py MODEL WORKDIR RESULT.json`` (``tests/matrix/matrix_models.py``
names the models). Each cell is one ``trtforge`` command line, run in this process through typer's
test runner (one import of torch and TensorRT per model, not per command); its outcome is one of

- ``pass``: exit 0;
- ``refused``: exit 1 or 2 with exactly one ``error:`` line (a clean refusal, or a failed check);
- ``traceback``: a traceback, the "bug in trtforge" line, or an exception out of the command;
- ``self-compare``: a ``compare`` that ran the same graph on both sides;
- ``messy``: any other exit code, or a failure with no or several ``error:`` lines;
- ``n/a``: not run, because the build it needs was refused (that refusal is its own cell).

Only ``pass``, ``refused`` and ``n/a`` are acceptable (tests/matrix/test_matrix.py).

Example:
    $ python tests/matrix/driver.py vit /tmp/m /tmp/m/vit.json && jq '.cells[0]' /tmp/m/vit.json
    {"cell": "inspect onnx", "argv": [...], "exit": 0, "outcome": "pass", "line": "", "seconds": 0.4}
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

import matrix_models  # noqa: E402

from trtforge.builder.portability import file_suffix  # noqa: E402
from trtforge.core.config import CompileConfig  # noqa: E402

PRECISIONS = ("fp32", "fp16", "bf16", "int8", "fp8")
#: The line ``compare`` prints for each side that runs an ONNX graph (``A runs GRAPH``).
RUNS_LINE = re.compile(r"^([AB]) runs (\S+\.onnx)", re.MULTILINE)
BUG_LINE = "this is a bug in trtforge"


def _invoke(argv: list[str]) -> tuple[int, str, str, BaseException | None]:
    from typer.testing import CliRunner

    from trtforge.cli import app

    result = CliRunner().invoke(app, argv, catch_exceptions=True)
    exc = result.exception if not isinstance(result.exception, SystemExit) else None
    return result.exit_code, result.stdout, result.stderr, exc


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else str(path)


def outcome(argv: list[str], code: int, stdout: str, stderr: str, exc: BaseException | None) -> tuple[str, str]:
    """(outcome, the line that says why) of one command (see the module docstring)."""
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    if exc is not None or "Traceback (most recent call last)" in stdout + stderr or BUG_LINE in stderr:
        first = f"{type(exc).__name__}: {exc}" if exc is not None else (errors[0] if errors else "traceback")
        return "traceback", first.splitlines()[0][:300] if first else "traceback"
    if argv[0] == "compare" and "--layerwise" not in argv and code == 0:
        graphs = RUNS_LINE.findall(stdout)
        if len(graphs) == 2 and _sha(Path(graphs[0][1])) == _sha(Path(graphs[1][1])):
            return "self-compare", f"both sides ran {graphs[0][1]}"
        if len(graphs) != 2 and any(a.endswith("@onnxruntime") for a in argv):
            return "self-compare", "compare did not name the graph each @onnxruntime side runs"
    if code == 0:
        return "pass", ""
    if code in (1, 2):
        if len(errors) == 1:
            return "refused", errors[0][:300]
        verdict = [line for line in stdout.splitlines() if line.startswith(("FAIL", "first layer past", "target not"))]
        if not errors and verdict:  # a measured failure: the verdict line on stdout
            return "refused", verdict[-1][:300]
        return "messy", f"exit {code} with {len(errors)} error lines: " + " | ".join(errors)[:300]
    return "messy", f"exit {code}"


def _calibration(inputs: tuple, shapes: dict, path: Path, count: int = 24) -> Path:
    """``count`` random samples of each input (int inputs: token ids below 8), as an .npz named like the inputs."""
    rng = np.random.default_rng(0)
    arrays = {}
    for spec in inputs:
        dims = shapes.get(spec.name, spec.shape)
        shape = (count, *[d if d > 0 else 1 for d in dims[1:]])
        arrays[spec.name] = (rng.integers(0, 8, shape).astype(spec.dtype) if not spec.dtype.startswith("float")
                             else rng.standard_normal(shape).astype(np.float32))
    np.savez(path, **arrays)
    return path


def cells(name: str, work: Path) -> list[tuple[str, list[str]]]:
    """(cell name, argv) of every command this model gets, in order (later cells use earlier ones' files)."""
    from trtforge.runtime.onnxruntime_route import OnnxRuntimeEngine

    kind, shapes = matrix_models.MODELS[name]
    onnx_path = matrix_models.onnx_file(name, work)
    out = work / "out"
    with OnnxRuntimeEngine(onnx_path) as engine:
        specs = engine.inputs
    fixed = matrix_models.SHAPES.get(name, {})
    calib = _calibration(specs, fixed, work / "calib.npz") if specs else work / "calib.npz"
    shape_flags = [x for n, dims in fixed.items() for x in ("--shapes", ":".join([n] + ["x".join(map(str, dims))] * 3))]
    targets = {"fp8": ("sm89", "sm120")}  # FP8 builds with TensorRT-RTX for the GPUs that run it
    art = {p: out / f"{name}_{p}{file_suffix(CompileConfig(targets=targets.get(p, ())))}.json"
           for p in PRECISIONS}
    table: list[tuple[str, list[str]]] = [("inspect onnx", ["inspect", str(onnx_path)])]
    for precision in PRECISIONS:
        # TensorRT-RTX runs no W8A8 INT8 (builder/capability.py): built anyway, the sidecar says what runs as what
        # FP8 builds with TensorRT-RTX for the GPUs that run it (sm89, sm120); ONNX Runtime checks it on the CPU
        extra = {"int8": ["--calib", str(calib), "--allow-unaccelerated"],
                 "fp8": ["--calib", str(calib), *[x for t in targets["fp8"] for x in ("--target", t)]]}.get(precision, [])
        table.append((f"build {precision}", ["build", str(onnx_path), "--precision", precision, "-o", str(out),
                                             "--name", name, "-q", *shape_flags, *extra]))
    for precision in PRECISIONS:
        table.append((f"inspect {precision}", ["inspect", str(art[precision])]))
        table.append((f"check {precision}", ["check", str(art[precision]), "--route", "onnxruntime",
                                             "--samples", "4", "--repeats", "2"]))
    table += [
        ("compare onnx-vs-fp16", ["compare", str(onnx_path), f"{art['fp16']}@onnxruntime", "--samples", "4"]),
        ("compare fp16-vs-bf16", ["compare", f"{art['fp16']}@onnxruntime", f"{art['bf16']}@onnxruntime",
                                  "--samples", "4"]),
        ("compare fp32-vs-int8", ["compare", f"{art['fp32']}@onnxruntime", f"{art['int8']}@onnxruntime",
                                  "--samples", "4"]),
        ("compare fp16-vs-fp8", ["compare", f"{art['fp16']}@onnxruntime", f"{art['fp8']}@onnxruntime",
                                 "--samples", "4"]),
        ("compare --layerwise fp16", ["compare", "--layerwise", str(out / f"{name}_reference_fp32.onnx"),
                                      str(out / f"{name}_fp16.onnx"), "--samples", "4"]),
        ("debug precision fp16", ["debug", "precision", str(art["fp16"]), "--precision", "fp16", "--metric", "rel_l2",
                                  "--target", "0.01", "--data", str(calib), "--samples", "8", "--held-out", "8",
                                  "--max-seconds", "5"]),  # a budget refusal is a clean outcome too
        ("export triton tensorrt", ["export", "triton", str(art["fp16"]), "--repo", str(work / "repo_trt")]),
        ("export triton python", ["export", "triton", str(art["fp16"]), "--repo", str(work / "repo_py"),
                                  "--backend", "python", "--route", "onnxruntime"]),
    ]
    if kind == "torch":
        factory = f"matrix_models:{name}"
        input_flags = [x for s in shapes for x in ("--input-shape", s)]
        table += [("coverage", ["coverage", factory, *input_flags]),
                  ("build --path direct fp16", ["build", factory, "--path", "direct", *input_flags, "--precision",
                                                "fp16", "-o", str(work / "direct"), "--name", name, "-q"])]
    return table


def run(name: str, work: Path) -> dict:
    """Every cell of ``name``'s row; the record the test and bench/matrix.py read."""
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    for cell, argv in cells(name, work):
        start = time.perf_counter()
        missing = [a for a in argv if a.startswith(str(work / "out")) and not Path(a.split("@")[0]).exists()]
        if missing and not cell.startswith("build"):
            rows.append({"cell": cell, "argv": argv, "exit": None, "outcome": "n/a", "seconds": 0.0,
                         "line": f"no {Path(missing[0].split('@')[0]).name}: its build did not write it (refused, or nothing was quantized and it wrote another precision's files)"})
            print(f"{name:18s} {cell:26s} n/a", flush=True)
            continue
        code, stdout, stderr, exc = _invoke(argv)
        kind, line = outcome(argv, code, stdout, stderr, exc)
        rows.append({"cell": cell, "argv": argv, "exit": code, "outcome": kind, "line": line,
                     "seconds": round(time.perf_counter() - start, 2)})
        print(f"{name:18s} {cell:26s} {kind:12s} {rows[-1]['seconds']:6.1f}s {line[:150]}", flush=True)
    return {"model": name, "cells": rows}


if __name__ == "__main__":
    record = run(sys.argv[1], Path(sys.argv[2]))
    Path(sys.argv[3]).write_text(json.dumps(record, indent=1))
