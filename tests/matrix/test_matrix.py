"""The command × model matrix (issue 20): every user-facing command on models nobody here wrote.

One driver run per row (``driver.py``, in this process) runs its whole row (a torch model once per exporter:
``vit/dynamo``, ``vit/torchscript``; each command run from another folder than the model file's); each cell is then one test here, which
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

#: (row, cell) → the finding that makes it fail today (xfail, strict): "issue N item M: what". The entries of
#: issue 20 are fixed; issue 35's items are being fixed: each entry goes once its fix lands (strict: a fixed
#: cell fails as XPASS until its entry is removed).
KNOWN: dict[tuple[str, str], str] = {
    ("efficientnet/torchscript", "build --path direct fp16"): (
        "new finding (issue 35 matrix): the direct path hands TensorRT negative convolution paddings on "
        "EfficientNet: 20 'IConvolutionLayer::setPre/PostPadding: API Usage Error' lines before its one-line "
        "refusal (avg_pool2d with ceil_mode), exit 2"),
}


def _cells(row: str) -> tuple[str, ...]:
    return driver.row_cells(row)


def _params():
    for row in matrix_models.ROWS:
        for cell in _cells(row):
            marks = ([pytest.mark.xfail(strict=True, reason=KNOWN[row, cell])] if (row, cell) in KNOWN else [])
            marks.append(pytest.mark.xdist_group(f"matrix-{row}"))  # a row's cells share its one driver run
            yield pytest.param(row, cell, id=f"{row}-{cell}", marks=marks)


@pytest.fixture(scope="session")
def matrix_rows(tmp_path_factory, engine_store):
    """row → its record (the driver's), each row run once, in this process, when first asked for.

    In process, as ``driver.py`` itself runs its commands: a row no longer pays a process's start-up (torch,
    transformers, TensorRT: about 8 s a row). ``bench/matrix.py`` runs the rows the same way."""
    import warnings

    from cli_in_process import environment

    rows: dict[str, dict] = {}

    def row(model: str) -> dict:
        if model not in rows:
            work = tmp_path_factory.mktemp(f"matrix_{model.replace('/', '_')}")
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
    name, exporter = matrix_models.split_row(model)
    if exporter == matrix_models.EXPORTERS[0] and cell == "inspect onnx":  # which file gets every command
        failed = got["outcome"] == "n/a"
        assert failed == (name in matrix_models.DYNAMO_EXPORT_FAILS), (
            f"{name}: the dynamo export {'fails' if failed else 'works'} {got['line']!r}; update "
            "matrix_models.DYNAMO_EXPORT_FAILS so every command runs on a file an exporter writes")
    if got["outcome"] == "n/a":
        pytest.skip(got["line"])
    assert got["outcome"] in ("pass", "refused"), (
        f"{model} / {cell}: {got['outcome']}: {got['line']}\n  trtforge {' '.join(got['argv'])}")
