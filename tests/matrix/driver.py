"""Every user-facing command on one foreign model, in one process: the matrix's row for that model.

Run ``python tests/matrix/driver.py ROW WORKDIR RESULT.json`` (``tests/matrix/matrix_models.py``'s ``ROWS``:
``vit/dynamo``, ``vit/torchscript``, ``ppocr_det``, ...). Each cell is one ``trtforge`` command line, run in
this process as the console script would (tests/support/cli_in_process.py: one import of torch and TensorRT
per row, not per command), in ``WORKDIR/elsewhere``: the model's file lies in another folder, named by a
relative path. Builds take the cheapest builder optimization level. Its outcome is one of

- ``pass``: exit 0;
- ``refused``: exit 1 or 2 with exactly one ``error:`` line (a clean refusal, or a failed check);
- ``traceback``: a traceback, the "bug in trtforge" line, or an exception out of the command;
- ``self-compare``: a ``compare`` that ran the same graph on both sides;
- ``wrong``: ``serve`` answered with outputs that differ from the same graph run in process;
- ``messy``: any other exit code, or a failure with no or several ``error:`` lines;
- ``n/a``: not run, because the build it needs was refused (that refusal is its own cell), or there is no
  ONNX file (torch's exporter refused the model: its reason is the line; a YOLO file not made).

Only ``pass``, ``refused`` and ``n/a`` are acceptable (tests/matrix/test_matrix.py).

Example:
    $ python tests/matrix/driver.py vit/dynamo /tmp/m /tmp/m/vit.json && jq '.cells[0]' /tmp/m/vit.json
    {"cell": "inspect onnx", "argv": ["inspect", "../model/vit.onnx"], "exit": 0, "outcome": "pass", ...}
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import time
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).parents[1] / "support")]

import matrix_models  # noqa: E402

from trtforge.builder.portability import file_suffix  # noqa: E402
from trtforge.core.config import CompileConfig  # noqa: E402

PRECISIONS = ("fp32", "fp16", "bf16", "int8", "fp8")
#: Weight-only precisions: built without data (issue 35 item 12), checked like the others.
WEIGHT_ONLY = ("int8-wo", "int4-wo")
#: The batch range of the ``--dynamic-batch`` build; its check runs 3 samples, so batches of 2 and 1.
DYNAMIC_BATCH = "1:2:4"
#: FP8 builds with TensorRT-RTX for the GPUs that run it.
FP8_TARGETS = ("sm89", "sm120")
#: Calibration samples (random) for int8 and fp8: one batch of 4 and the held-out share.
CALIBRATION_SAMPLES = 8
#: The cells every row with an ONNX file gets, in the order they run.
ONNX_CELLS = ("inspect onnx", *(f"build {p}" for p in PRECISIONS),
              *(f"{c} {p}" for p in PRECISIONS for c in ("inspect", "check")),
              "compare onnx-vs-fp16", "compare fp16-vs-bf16", "compare fp32-vs-int8", "compare fp16-vs-fp8",
              "compare --layerwise fp16", "compare --layerwise bf16", "debug precision fp16",
              "export triton tensorrt", "export triton python",
              *(f"{c} {p}" for p in WEIGHT_ONLY for c in ("build", "check")),
              "build fp16 --dynamic-batch", "check fp16 --dynamic-batch", "quantize sensitivity int8",
              "bench onnxruntime", "tune onnxruntime", "build fp16 --refittable", "serve onnxruntime")
#: The first files ``make test`` serves on a real tritonserver, one per kind of input and output (images, dynamic
#: dims, token ids, audio frames, detector heads, multimodal, int64 and bool inputs, a scalar output, an input that
#: is also an output, no input); ``TRTFORGE_MATRIX=full`` (``make test-matrix``) serves every first file. A
#: server's start and stop cost about 8 s and 3 CPU s a row, which every row of the suite could not hold.
SERVE_ROWS = frozenset({"ppocr_det", "ppocr_rec", "vit/dynamo", "minilm/dynamo", "whisper_encoder/dynamo",
                        "detr/dynamo", "yolov8n", "clip_text/dynamo", "int64_bool_inputs", "scalar_output",
                        "input_is_output", "no_input"})
#: The cells of the second file of a torch model (``matrix_models.full_exporter`` names the first): the
#: commands where the graph an exporter writes makes the difference (parse, passes, FP16 numerics, the layer-wise
#: walk, the Triton export). Every precision and every other command runs on the first file; running all of
#: them on both doubled the matrix's cost (about 600 CPU s) for what the first file already shows.
SHORT_CELLS = ("inspect onnx", "build fp16", "inspect fp16", "check fp16", "compare onnx-vs-fp16",
               "compare --layerwise fp16", "export triton tensorrt")
#: The cells of a torch model's last exporter's row: the direct path takes no ONNX file, so once per model.
TORCH_CELLS = ("coverage", "build --path direct fp16")


def row_cells(row: str) -> tuple[str, ...]:
    """The cells ``row`` gets: every ONNX cell on a model's first file (``serve`` on ``SERVE_ROWS`` unless
    ``TRTFORGE_MATRIX=full``), the short set on its second, and the direct path once per model (its last
    exporter's row)."""
    name, exporter = matrix_models.split_row(row)
    kind = matrix_models.MODELS[name][0]
    first = kind != "torch" or exporter == matrix_models.full_exporter(name)
    direct = kind == "torch" and exporter == matrix_models.EXPORTERS[-1]
    served = row in SERVE_ROWS or os.environ.get("TRTFORGE_MATRIX", "") == "full"
    onnx_cells = tuple(c for c in ONNX_CELLS if served or not c.startswith("serve")) if first else SHORT_CELLS
    return onnx_cells + (TORCH_CELLS if direct else ())


#: The line ``compare`` prints for each side that runs an ONNX graph (``A runs GRAPH``).
RUNS_LINE = re.compile(r"^([AB]) runs (\S+\.onnx)", re.MULTILINE)
BUG_LINE = "this is a bug in trtforge"


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else str(path)


def outcome(argv: list[str], code: int, stdout: str, stderr: str, exc: BaseException | None,
            cwd: Path = Path()) -> tuple[str, str]:
    """(outcome, the line that says why) of one command run in ``cwd`` (see the module docstring)."""
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    if exc is not None or "Traceback (most recent call last)" in stdout + stderr or BUG_LINE in stderr:
        first = f"{type(exc).__name__}: {exc}" if exc is not None else (errors[0] if errors else "traceback")
        return "traceback", first.splitlines()[0][:300] if first else "traceback"
    if argv[0] == "compare" and "--layerwise" not in argv and code == 0:
        graphs = RUNS_LINE.findall(stdout)
        if len(graphs) == 2 and _sha(cwd / graphs[0][1]) == _sha(cwd / graphs[1][1]):
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


def _calibration(inputs: tuple, shapes: dict, path: Path, count: int = CALIBRATION_SAMPLES) -> Path:
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


def _builds(name: str, model: str, out: str, calib: str, shape_flags: list[str]) -> list[tuple[str, list[str]]]:
    """The build cells, at the cheapest builder optimization level (the matrix tests commands, not the level)."""
    table = []
    for precision in PRECISIONS:
        # TensorRT-RTX runs no W8A8 INT8 (builder/capability.py): built anyway, the sidecar says what runs as what
        # FP8 builds with TensorRT-RTX for the GPUs that run it (sm89, sm120); ONNX Runtime checks it on the CPU
        extra = {"int8": ["--calib", calib, "--calib-batch-size", "4", "--allow-unaccelerated"],
                 "fp8": ["--calib", calib, "--calib-batch-size", "4",
                         *[x for t in FP8_TARGETS for x in ("--target", t)]]}.get(precision, [])
        table.append((f"build {precision}", ["build", model, "--precision", precision, "-o", out, "--name", name,
                                             "-q", "--opt-level", "0", *shape_flags, *extra]))
    return table


def cells(row: str, work: Path, onnx_path: Path | None) -> list[tuple[str, list[str]]]:
    """(cell name, argv) of every command this row gets, in order (later cells use earlier ones' files).

    Paths are relative to the folder the commands run in (``work/elsewhere``): the model's file lies in
    another folder (``work/model``, or the wheel's), the artifacts in ``work/out``. ``onnx_path`` None: the
    file could not be made (its cells are n/a), the torch cells still run."""
    name, exporter = matrix_models.split_row(row)
    kind, shapes = matrix_models.MODELS[name]
    here = work / "elsewhere"
    table: list[tuple[str, list[str]]] = []
    wanted = row_cells(row)
    if onnx_path is not None:
        table = [(cell, argv) for cell, argv in _onnx_cells(name, work, onnx_path, here) if cell in wanted]
    if set(TORCH_CELLS) <= set(wanted):  # the direct path: once per model (its last exporter's row), where asked for
        factory = f"matrix_models:{name}"
        input_flags = [x for s in shapes for x in ("--input-shape", s)]
        table += [("coverage", ["coverage", factory, *input_flags]),
                  ("build --path direct fp16", ["build", factory, "--path", "direct", *input_flags, "--precision",
                                                "fp16", "-o", "../direct", "--name", name, "-q", "--opt-level", "0"])]
    return table


def _onnx_cells(name: str, work: Path, onnx_path: Path, here: Path) -> list[tuple[str, list[str]]]:
    from trtforge.runtime.onnxruntime_route import OnnxRuntimeEngine

    model = os.path.relpath(onnx_path, here)
    with OnnxRuntimeEngine(onnx_path) as engine:
        specs = engine.inputs
    fixed = matrix_models.SHAPES.get(name, {})
    calib = os.path.relpath(_calibration(specs, fixed, work / "calib.npz") if specs else work / "calib.npz", here)
    shape_flags = [x for n, dims in fixed.items() for x in ("--shapes", ":".join([n] + ["x".join(map(str, dims))] * 3))]
    out = "../out"
    art = {p: f"{out}/{name}_{p}{file_suffix(CompileConfig(targets=FP8_TARGETS if p == 'fp8' else ()))}.json"
           for p in PRECISIONS}
    table = [("inspect onnx", ["inspect", model]), *_builds(name, model, out, calib, shape_flags)]
    for precision in PRECISIONS:
        table.append((f"inspect {precision}", ["inspect", art[precision]]))
        table.append((f"check {precision}", ["check", art[precision], "--route", "onnxruntime",
                                             "--samples", "2", "--repeats", "1"]))
    reference = f"{out}/{name}_reference_fp32.onnx"
    table += [
        ("compare onnx-vs-fp16", ["compare", model, f"{art['fp16']}@onnxruntime", "--samples", "2"]),
        ("compare fp16-vs-bf16", ["compare", f"{art['fp16']}@onnxruntime", f"{art['bf16']}@onnxruntime",
                                  "--samples", "2"]),
        ("compare fp32-vs-int8", ["compare", f"{art['fp32']}@onnxruntime", f"{art['int8']}@onnxruntime",
                                  "--samples", "2"]),
        ("compare fp16-vs-fp8", ["compare", f"{art['fp16']}@onnxruntime", f"{art['fp8']}@onnxruntime",
                                 "--samples", "2"]),
        ("compare --layerwise fp16", ["compare", "--layerwise", reference, f"{out}/{name}_fp16.onnx", "--samples", "2"]),
        ("compare --layerwise bf16", ["compare", "--layerwise", reference, f"{out}/{name}_bf16.onnx", "--samples", "2"]),
        ("debug precision fp16", ["debug", "precision", art["fp16"], "--precision", "fp16", "--metric", "rel_l2",
                                  "--target", "0.01", "--data", calib, "--samples", "4", "--held-out", "4",
                                  "--max-seconds", "2"]),  # a budget refusal is a clean outcome too
        ("export triton tensorrt", ["export", "triton", art["fp16"], "--repo", "../repo_trt"]),
        ("export triton python", ["export", "triton", art["fp16"], "--repo", "../repo_py",
                                  "--backend", "python", "--route", "onnxruntime"]),
    ]
    return table + _more_cells(name, model, out, calib, fixed, shape_flags, art["fp16"])


def _more_cells(name: str, model: str, out: str, calib: str, fixed: dict, shape_flags: list[str],
                fp16: str) -> list[tuple[str, list[str]]]:
    """Weight-only builds without data, a ``--dynamic-batch`` build checked at batches of 2 and 1, the per-layer
    sensitivity, ``bench`` and ``tune`` on the ONNX Runtime route, a refittable build (refused in one line on a
    machine without a GPU: TensorRT-RTX compiles refittable engines on one, so ``refit`` has nothing to refit here;
    tests/test_refit.py runs it through the TensorRT double), and ``serve`` (the cheapest level of each: the
    command, not the speed)."""
    # an input with fixed non-batch dims takes its batch range in --shapes (--batch and --shapes would disagree)
    ranged = [x for n, dims in fixed.items() for x in ("--shapes", ":".join(
        [n] + ["x".join(map(str, (b, *dims[1:]))) for b in map(int, DYNAMIC_BATCH.split(":"))]))]
    batch_flags = ranged or ["--batch", DYNAMIC_BATCH]
    table = []
    for precision in WEIGHT_ONLY:
        table += [(f"build {precision}", ["build", model, "--precision", precision, "-o", out, "--name", name, "-q",
                                          "--opt-level", "0", *shape_flags]),
                  (f"check {precision}", ["check", f"{out}/{name}_{precision}.json", "--route", "onnxruntime",
                                          "--samples", "2", "--repeats", "1"])]
    dynamic = "../out_dynamic"
    table += [
        ("build fp16 --dynamic-batch", ["build", model, "--precision", "fp16", "--dynamic-batch", *batch_flags,
                                        "-o", dynamic, "--name", name, "-q", "--opt-level", "0"]),
        ("check fp16 --dynamic-batch", ["check", f"{dynamic}/{name}_fp16.json", "--route", "onnxruntime",
                                        "--samples", "3", "--repeats", "1"]),
        ("quantize sensitivity int8", ["quantize", "sensitivity", model, "--data", calib, "--top", "3",
                                       "--calib-batch-size", "4"]),
        ("bench onnxruntime", ["bench", fp16, "--route", "onnxruntime", "--warmup", "1", "--repeats", "3",
                               "--device", "cpu"]),
        ("tune onnxruntime", ["tune", model, "--data", calib, "-o", "../tuned", "--route", "onnxruntime",
                              "--precision", "fp16", "--batch", "1", "--opt-level", "0", "--warmup", "1",
                              "--repeats", "3", "-q"]),
        ("build fp16 --refittable", ["build", model, "--precision", "fp16", "--refittable", "-o", "../out_refit",
                                     "--name", name, "-q", "--opt-level", "0", *shape_flags]),
        ("serve onnxruntime", ["serve", fp16, "--route", "onnxruntime"]),
    ]
    return table


def run_cell(argv: list[str], here: Path) -> tuple[int, str, str, str]:
    """(exit code, outcome, its line, stderr or else stdout) of one ``trtforge`` command run in process in ``here``."""
    from cli_in_process import run as trtforge

    if argv[0] == "serve":
        return serve_cell(here / argv[1])
    try:
        done, exc = trtforge(argv, cwd=here), None
        code, stdout, stderr = done.returncode, done.stdout, done.stderr
    except Exception as error:  # out of the command itself: the traceback outcome
        code, stdout, stderr, exc = 1, "", "", error
    kind, line = outcome(argv, code, stdout, stderr, exc, here)
    return code, kind, line, stderr or stdout


def serve_cell(sidecar_path: Path) -> tuple[int, str, str, str]:
    """``trtforge serve SIDECAR --route onnxruntime`` through the API the command runs (``serve.server.Server``:
    a real tritonserver, until stopped rather than Ctrl-C), one request of the inputs ``check`` makes, and its
    answer against the same graph run here: ``pass``; ``refused`` (a one-line user error); ``wrong`` (the served
    answer differs: never acceptable); ``traceback``."""
    import tritonclient.http as http
    from tritonclient.utils import np_to_triton_dtype

    from trtforge.core.errors import UserError
    from trtforge.core.sidecar import read_sidecar
    from trtforge.measure.inputs import make_inputs
    from trtforge.runtime.load import load, route_options
    from trtforge.serve.server import ServeConfig, Server, free_ports

    try:
        sidecar = read_sidecar(sidecar_path)
        feed = make_inputs(sidecar.inputs, sidecar.profiles, 1)
        with load(sidecar_path, route="onnxruntime", device="cpu", **route_options("onnxruntime")) as engine:
            expected = {k: np.asarray(v) for k, v in engine(**feed).items()}
        ports = dict(zip(("http_port", "grpc_port", "metrics_port"), free_ports(), strict=True))
        with Server([sidecar_path], ServeConfig(route="onnxruntime", **ports)).start() as server:
            client = http.InferenceServerClient(server.url("http").removeprefix("http://"))
            requests = []
            for name, value in feed.items():
                requests.append(http.InferInput(name, list(value.shape), np_to_triton_dtype(value.dtype)))
                requests[-1].set_data_from_numpy(value)
            answer = client.infer(sidecar.name, requests, outputs=[http.InferRequestedOutput(o) for o in expected])
            got = {name: answer.as_numpy(name) for name in expected}
    except UserError as exc:
        return 1, "refused", f"error: {exc}".splitlines()[0][:300], str(exc)
    except Exception as exc:  # noqa: BLE001 - the cell's outcome, as run_cell reports an exception
        return 1, "traceback", f"{type(exc).__name__}: {exc}".splitlines()[0][:300], repr(exc)
    bad = [f"{k}: shape {got[k].shape} against {v.shape}" if got[k].shape != v.shape else
           f"{k}: max |diff| {np.abs(got[k].astype(np.float64) - v).max():.3g}" for k, v in expected.items()
           if got[k].shape != v.shape or not np.allclose(got[k], v, rtol=1e-5, atol=1e-6)]
    return (1, "wrong", "; ".join(bad)[:300], "") if bad else (0, "pass", "", "")


def _model_file(row: str, work: Path) -> tuple[Path | None, str]:
    """(the row's ONNX file, "") or (None, why there is none: the exporter's refusal, a YOLO file not made)."""
    try:
        return matrix_models.onnx_file(row, work / "model"), ""
    except (matrix_models.ExportFailed, FileNotFoundError) as exc:
        return None, str(exc)


def run(row: str, work: Path) -> dict:
    """Every cell of ``row``'s row (``MODEL/EXPORTER`` or ``MODEL``); the record the test and bench/matrix.py read.

    Each command runs in ``work/elsewhere``, not in the model's folder."""
    here = work / "elsewhere"
    for folder in (here, work / "model"):
        folder.mkdir(parents=True, exist_ok=True)
    cpu = time.process_time()
    onnx_path, why = _model_file(row, work)
    rows = [] if onnx_path is not None else [{"cell": cell, "argv": [], "exit": None, "outcome": "n/a", "line": why,
                                               "seconds": 0.0} for cell in row_cells(row) if cell not in TORCH_CELLS]
    for cell, argv in cells(row, work, onnx_path):
        start, cpu_start = time.perf_counter(), time.process_time()
        missing = [a for a in argv if a.startswith(("../out/", "../out_dynamic/")) and not (here / a.split("@")[0]).exists()]
        if missing and not cell.startswith("build"):
            rows.append({"cell": cell, "argv": argv, "exit": None, "outcome": "n/a", "seconds": 0.0,
                         "line": f"no {Path(missing[0].split('@')[0]).name}: its build did not write it (refused, or nothing was quantized and it wrote another precision's files)"})
            print(f"{row:24s} {cell:26s} n/a", flush=True)
            continue
        code, kind, line, _ = run_cell(argv, here)
        rows.append({"cell": cell, "argv": argv, "exit": code, "outcome": kind, "line": line,
                     "seconds": round(time.perf_counter() - start, 2), "cpu": round(time.process_time() - cpu_start, 2)})
        print(f"{row:24s} {cell:26s} {kind:12s} {rows[-1]['cpu']:6.1f} CPU s {line[:150]}", flush=True)
    return {"model": row, "cells": rows, "cpu_seconds": round(time.process_time() - cpu, 1)}


if __name__ == "__main__":
    record = run(sys.argv[1], Path(sys.argv[2]))
    Path(sys.argv[3]).write_text(json.dumps(record, indent=1))
