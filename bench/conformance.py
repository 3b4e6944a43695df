"""ONNX's operator tests (``onnx.backend.test.case.node``, every float32 case) through trtforge.

Writes docs/conformance.md: the counts, what TensorRT refuses (one distinct reason per op), what
trtforge does not do yet, and what trtforge breaks (that list must be empty), plus the per-case JSON.

Run:
    $ python bench/conformance.py                      # every float32 case (about 5 minutes on 2 cores)
    $ python bench/conformance.py --per-op 1           # the CI sample of tests/conformance
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import logging
import platform
import re
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import onnx
import onnxruntime

from trtforge.conformance.onnx_node import FP16_TOLERANCE, float32_cases, run_case
from trtforge.core import trt

ROOT = Path(__file__).resolve().parents[1]


def _reason(text: str) -> str:
    """A refusal without the case's file path and node name, so one op's cases group by reason."""
    text = re.sub(r" \S+\.onnx", " <model>", text)
    text = re.sub(r"node '[^']*' ", "", text)
    return text.replace("; replace or remove this op before export, or keep it out of the engine", "")[:220]


def _table(rows: list[tuple], header: tuple[str, ...]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return lines


def _refusals(results: list, who: str) -> list[tuple]:
    grouped: dict[tuple[str, str], list[str]] = defaultdict(list)
    for r in results:
        if r.refused and r.refused_by == who:
            grouped[(r.op, _reason(r.refused))].append(r.name)
    return [(op, len(names), reason) for (op, reason), names in sorted(grouped.items())]


def markdown(results: list, seconds: float, per_op: int | None) -> str:
    info = trt.info()
    n = len(results)
    counts = {
        "cases": n, "op types": len({r.op for r in results}),
        "processed FP32 graph equals the original in ORT": f"{sum(bool(r.fp32_equal) for r in results)} of "
                                                           f"{sum(r.fp32_equal is not None for r in results)}",
        "FP32 builds": sum(r.fp32_built for r in results), "FP16 builds": sum(r.fp16_built for r in results),
        f"FP16 within {FP16_TOLERANCE:g} (strict evaluator)": sum(
            r.fp16_error is not None and r.fp16_error <= FP16_TOLERANCE for r in results),
        "refused by TensorRT": sum(r.refused_by == "TensorRT" for r in results),
        "not done by trtforge": sum(r.refused_by == "trtforge" for r in results),
        "broken by trtforge": sum(bool(r.broken) for r in results),
    }
    broken = [(r.name, "; ".join(r.broken)) for r in results if r.broken]
    lines = [
        "# ONNX operator conformance", "",
        "ONNX's own node tests (`onnx.backend.test.case.node`, float32 cases, `_expanded` variants left out) "
        "through `trtforge.compile` at FP32 and FP16. Per case: the processed FP32 graph must equal the "
        "original in ONNX Runtime wherever ONNX Runtime runs the original; the FP16 graph must build wherever "
        f"the FP32 graph builds and stay within {FP16_TOLERANCE:g} of the expected outputs under the strict "
        "evaluator (`onnx.reference`, each node in its declared type); every refusal must be one line naming "
        "the op. tests/conformance runs one case per op type in CI.", "",
        f"Command: `python bench/conformance.py{'' if per_op is None else f' --per-op {per_op}'}` · "
        f"{info.flavour} {info.version}, onnx {onnx.__version__}, onnxruntime {onnxruntime.__version__} · "
        f"{platform.machine()} CPU, no GPU (TensorRT-RTX builds on the CPU) · {dt.date.today().isoformat()} · "
        f"{seconds:.0f} s", "",
        *_table(list(counts.items()), ("", "count")), "",
        "## What trtforge breaks", "",
        *(_table(broken, ("case", "what")) if broken else ["Nothing."]), "",
        "## What trtforge does not do yet", "",
        "Inputs that set shapes (shape tensors: Slice starts, Tile repeats, Expand shapes, Split sizes, Resize "
        "sizes) need their values when TensorRT builds. trtforge sets them in every profile from the example "
        "inputs (each case's own) and records them in the sidecar (`shape_inputs`); an input without values "
        "is refused in one line. The runtime routes take them at run time (the TensorRT route from host memory, "
        "refusing values the engine was not built for), checked against the TensorRT double and ONNX Runtime; "
        "no engine with one has run on a GPU yet.", "",
        *(_table(not_done, ("op", "cases", "message")) if (not_done := _refusals(results, "trtforge")) else ["Nothing."]),
        "",
        "## What TensorRT-RTX refuses", "",
        *_table(_refusals(results, "TensorRT"), ("op", "cases", "TensorRT's reason")), "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-op", type=int, default=None, help="at most this many cases per op type")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "conformance.md")
    args = parser.parse_args()
    logging.getLogger("trtforge").setLevel(logging.ERROR)
    start = time.perf_counter()
    cases = float32_cases(per_op=args.per_op)
    with tempfile.TemporaryDirectory(prefix="trtforge-conformance-") as work:
        results = [run_case(case, Path(work)) for case in cases]
    seconds = time.perf_counter() - start
    args.out.write_text(markdown(results, seconds, args.per_op))
    (ROOT / "docs" / "bench" / "conformance.json").write_text(
        json.dumps([dataclasses.asdict(r) for r in results], indent=1))
    print(f"{len(results)} cases, {sum(bool(r.broken) for r in results)} broken; wrote {args.out}")


if __name__ == "__main__":
    main()
