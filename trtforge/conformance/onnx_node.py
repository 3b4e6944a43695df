"""ONNX's own operator tests (``onnx.backend.test.case.node``) through trtforge, float32 cases.

Per case: the processed FP32 graph must equal the original in ONNX Runtime wherever ONNX Runtime
runs the original; the FP16 graph must build wherever the FP32 graph builds and stay within
``FP16_TOLERANCE`` of the case's expected outputs under the strict evaluator (each node in its
declared type); every TensorRT refusal must be one line naming the op. A refusal is TensorRT's
(``refused``); anything else that fails is trtforge's (``broken``), and that list must be empty.

Example:
    >>> cases = float32_cases(per_op=1)
    >>> result = run_case(cases[0], Path("/tmp/work"))
    >>> result.refused, result.broken
    (None, ())
"""

from __future__ import annotations

import contextlib
import io
import tempfile
import warnings
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from trtforge.builder.build import BuildFailedError, OnnxParseError, ShapeInputError
from trtforge.core.errors import TrtforgeError
from trtforge.passes.evaluate import FP32_TOLERANCE, relative_error, run_ort, run_strict
from trtforge.passes.graph import load_ir
from trtforge.passes.process import reference_graph
from trtforge.pipeline import compile as compile_model

FP16_TOLERANCE = 1e-2
#: Numpy kinds a float32 case may feed besides float32 (indices, shapes, masks).
OTHER_INPUT_KINDS = frozenset({"i", "u", "b"})


@dataclass(frozen=True)
class CaseResult:
    """One case: what TensorRT refused (one line, or None) and what trtforge broke (empty: nothing)."""

    name: str
    op: str
    fp32_equal: bool | None
    fp32_built: bool
    fp16_built: bool
    fp16_error: float | None
    refused: str | None
    broken: tuple[str, ...]
    #: Who refused: "TensorRT", or "trtforge" for what trtforge does not do yet (shape-tensor input values).
    refused_by: str | None = None


def _is_float32_case(case: Any) -> bool:
    if not case.data_sets:
        return False
    inputs, outputs = case.data_sets[0]
    arrays = [np.asarray(a) for a in (*inputs, *outputs) if isinstance(a, np.ndarray)]
    if len(arrays) != len(inputs) + len(outputs) or not outputs:
        return False
    return all(np.asarray(o).dtype == np.float32 for o in outputs) and all(
        a.dtype == np.float32 or a.dtype.kind in OTHER_INPUT_KINDS for a in map(np.asarray, inputs))


def float32_cases(per_op: int | None = None, ops: Sequence[str] | None = None) -> list[Any]:
    """ONNX's node test cases whose outputs are float32 (inputs float32, ints or bools), not the
    ``_expanded`` function variants; at most ``per_op`` per op type, and only ``ops`` when given."""
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        from onnx.backend.test.case.node import collect_testcases

        cases = collect_testcases()
    by_op: dict[str, list[Any]] = defaultdict(list)
    for case in sorted(cases, key=lambda c: c.name):
        if "_expanded" in case.name or not _is_float32_case(case):
            continue
        op = case.model.graph.node[0].op_type
        if (ops is None or op in ops) and (per_op is None or len(by_op[op]) < per_op):
            by_op[op].append(case)
    return [case for op in sorted(by_op) for case in by_op[op]]


def _feeds(case: Any) -> dict[str, np.ndarray]:
    inputs, _ = case.data_sets[0]
    return {v.name: np.asarray(a) for v, a in zip(case.model.graph.input, inputs, strict=False)}


def _fp32_graph_check(case: Any, feeds: dict[str, np.ndarray]) -> tuple[bool | None, list[str]]:
    """Whether the processed FP32 graph equals the original in ORT (None: ORT cannot run the original)."""
    try:
        original = run_ort(load_ir(case.model), feeds)
    except Exception:  # noqa: BLE001 - ORT refuses many op/attribute combinations; not ours to judge
        return None, []
    try:
        processed = run_ort(reference_graph(onnx.ModelProto.FromString(case.model.SerializeToString())), feeds)
    except Exception as exc:  # noqa: BLE001 - whatever breaks here, our passes broke it
        return False, [f"processed FP32 graph does not run: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}"]
    worst = max((relative_error(o, p) for o, p in zip(original, processed, strict=True)), default=0.0)
    return worst <= FP32_TOLERANCE, [] if worst <= FP32_TOLERANCE else [f"processed FP32 graph differs ({worst:.3g})"]


def _build(case: Any, path: Path, precision: str, feeds: dict[str, np.ndarray], out: Path):
    """(artifact, refusal, broken reason): exactly one is not None; a refusal is an exception with one line."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            art = compile_model(str(path), feeds, precision=precision, output_dir=out / precision, cache=False,
                                progress=False)
        return art, None, None
    except (OnnxParseError, BuildFailedError, ShapeInputError) as exc:
        return None, exc, None
    except TrtforgeError as exc:
        return None, None, f"{precision}: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    except Exception as exc:  # noqa: BLE001 - a crash is ours, whatever its type
        return None, None, f"{precision}: crash {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"


def _fp16_error(case: Any, art: Any, feeds: dict[str, np.ndarray]) -> float:
    """Worst relative error of the FP16 graph under the strict evaluator (ORT where onnx.reference cannot)."""
    _, expected = case.data_sets[0]
    graph = load_ir(art.onnx_path)
    try:
        outputs = run_strict(graph, feeds)
    except Exception:  # noqa: BLE001 - onnx.reference lacks some ops/types; ORT judges those
        outputs = run_ort(graph, feeds)
    return max((relative_error(e, o) for e, o in zip(expected, outputs, strict=True)), default=0.0)


def run_case(case: Any, workdir: Path) -> CaseResult:
    """Run one case (see the module docstring)."""
    op = case.model.graph.node[0].op_type
    feeds = _feeds(case)
    fp32_equal, broken = _fp32_graph_check(case, feeds)
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        path = Path(tmp) / f"{case.name}.onnx"
        onnx.save(case.model, str(path))
        art32, refusal, why = _build(case, path, "fp32", feeds, Path(tmp))
        broken += [why] if why else []
        art16, error = None, None
        if art32 is not None:
            art16, refused16, why16 = _build(case, path, "fp16", feeds, Path(tmp))
            if art16 is None:
                broken.append(why16 or f"fp16 refused where fp32 built: {refused16}")
            else:
                error = _fp16_error(case, art16, feeds)
                if not error <= FP16_TOLERANCE:
                    broken.append(f"fp16 error {error:.3g} > {FP16_TOLERANCE:g} (strict evaluator)")
    refused = None if refusal is None else str(refusal)
    if refused is not None and ("\n" in refused or op not in refused):
        broken.append(f"refusal is not one line naming {op}: {refused[:200]!r}")
    refused_by = None if refusal is None else "trtforge" if isinstance(refusal, ShapeInputError) else "TensorRT"
    return CaseResult(case.name, op, fp32_equal, art32 is not None, art16 is not None, error, refused,
                      tuple(broken), refused_by)
