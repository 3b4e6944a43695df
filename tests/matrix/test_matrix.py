"""The command × model matrix (issue 20): every user-facing command on models nobody here wrote.

One subprocess per model (``driver.py``) runs its whole row; each cell is then one test here, which
passes when the command passed or refused in one line, and fails on a traceback, a ``compare`` of a
graph with itself, or a messy failure. The table of results is docs/conformance.md's "Foreign models"
section (``python bench/matrix.py``).

Cells that fail because of a finding another change fixes are ``xfail(strict=True)`` in ``KNOWN``:
they turn into failures once fixed, so the entry is removed then.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

import driver  # noqa: E402
import matrix_models  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.matrix]

#: (model, cell) → the finding of issue 20 that makes it fail today (xfail, strict). Empty: every finding the
#: matrix met (scalar output, no input, export of a model without inputs) is fixed; add an entry with a new one.
KNOWN: dict[tuple[str, str], str] = {}

#: The cells every model gets (the torch models also get "coverage" and "build --path direct fp16").
ONNX_CELLS = ("inspect onnx", *(f"build {p}" for p in driver.PRECISIONS),
              *(f"{c} {p}" for p in driver.PRECISIONS for c in ("inspect", "check")),
              "compare onnx-vs-fp16", "compare fp16-vs-bf16", "compare fp32-vs-int8", "compare --layerwise fp16",
              "debug precision fp16", "export triton tensorrt", "export triton python")
TORCH_CELLS = ("coverage", "build --path direct fp16")


def _params():
    for model, (kind, _) in matrix_models.MODELS.items():
        for cell in ONNX_CELLS + (TORCH_CELLS if kind == "torch" else ()):
            marks = ([pytest.mark.xfail(strict=True, reason=f"issue 20: {KNOWN[model, cell]}")]
                     if (model, cell) in KNOWN else [])
            marks.append(pytest.mark.xdist_group(f"matrix-{model}"))  # a row's cells share its one driver run
            yield pytest.param(model, cell, id=f"{model}-{cell}", marks=marks)


@pytest.fixture(scope="session")
def matrix_rows(tmp_path_factory):
    """model → its row (the driver's record), each model run once, in its own process, when first asked for."""
    rows: dict[str, dict] = {}
    cache = tmp_path_factory.mktemp("matrix_engine_cache")

    def row(model: str) -> dict:
        if model not in rows:
            work = tmp_path_factory.mktemp(f"matrix_{model}")
            env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(HERE)]), TRTFORGE_CACHE_DIR=str(cache),
                       COLUMNS="200", PYTHONWARNINGS="ignore")
            proc = subprocess.run([sys.executable, str(HERE / "driver.py"), model, str(work), str(work / "row.json")],
                                  capture_output=True, text=True, env=env, timeout=900, check=False)
            assert proc.returncode == 0, f"the driver itself failed on {model}:\n{proc.stderr[-4000:]}"
            rows[model] = json.loads((work / "row.json").read_text())
        return rows[model]

    return row


@pytest.mark.parametrize(("model", "cell"), list(_params()))
def test_cell(matrix_rows, model, cell):
    cells = {c["cell"]: c for c in matrix_rows(model)["cells"]}
    assert cell in cells, f"the driver ran no cell {cell!r} for {model}"
    got = cells[cell]
    if got["outcome"] == "n/a":
        pytest.skip(got["line"])
    assert got["outcome"] in ("pass", "refused"), (
        f"{model} / {cell}: {got['outcome']}: {got['line']}\n  trtforge {' '.join(got['argv'])}")
