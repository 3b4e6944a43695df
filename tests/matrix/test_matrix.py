"""The command × model matrix (issue 20): every user-facing command on models nobody here wrote.

One driver run per model (``driver.py``, in this process) runs its whole row; each cell is then one test here, which
passes when the command passed or refused in one line, and fails on a traceback, a ``compare`` of a
graph with itself, or a messy failure. The table of results is docs/conformance.md's "Foreign models"
section (``python bench/matrix.py``).

Cells that fail because of a finding another change fixes are ``xfail(strict=True)`` in ``KNOWN``:
they turn into failures once fixed, so the entry is removed then.
"""

from __future__ import annotations

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
def matrix_rows(tmp_path_factory, engine_store):
    """model → its row (the driver's record), each model run once, in this process, when first asked for.

    In process, as ``driver.py`` itself runs its commands: a row no longer pays a process's start-up (torch,
    transformers, TensorRT: about 8 s a row). ``bench/matrix.py`` still runs a process per model."""
    import warnings

    from cli_in_process import environment

    rows: dict[str, dict] = {}

    def row(model: str) -> dict:
        if model not in rows:
            work = tmp_path_factory.mktemp(f"matrix_{model}")
            with environment({"TRTFORGE_CACHE_DIR": str(engine_store), "COLUMNS": "200"}), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                rows[model] = driver.run(model, work)
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
