"""Issue 35 item 3 and "one loader for ONNX files": every command reads an ONNX file through
``capture.onnx_file.load_onnx``, so a model whose weights sit in ``NAME.onnx.data`` beside it (what torch's
dynamo exporter writes) works from any working folder. ``inspect`` said "parser refuses" there, ``debug
precision`` failed on the data file, ``compare --layerwise`` crashed in ONNX Runtime ("escapes working
directory"); ``build`` worked. Each command runs here on such a file from another folder."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from cli_in_process import run
from tiny_model import EXAMPLE_SHAPE

import trtforge

pytestmark = pytest.mark.needs_trt
PACKAGE = Path(trtforge.__file__).parent
#: The loader itself, and reads of the graph alone (``load_external_data=False``: names and nodes, no weights).
LOADER = PACKAGE / "capture" / "onnx_file.py"


@pytest.fixture(scope="module")
def external(tiny_onnx, tmp_path_factory) -> Path:
    """The tiny model saved with every weight in ``tiny_ext.onnx.data`` beside it, in a folder of its own."""
    folder = tmp_path_factory.mktemp("models")
    onnx.save(onnx.load(str(tiny_onnx)), str(folder / "tiny_ext.onnx"), save_as_external_data=True,
              all_tensors_to_one_file=True, location="tiny_ext.onnx.data", size_threshold=0)
    assert (folder / "tiny_ext.onnx.data").is_file()
    return folder / "tiny_ext.onnx"


def test_every_command_reads_external_data_from_the_models_folder(external, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    np.save(elsewhere / "x.npy", np.random.default_rng(0).standard_normal((12, *EXAMPLE_SHAPE[1:])).astype(np.float32))
    model = Path(*([".."] * (len(elsewhere.parts) - 1))) / external.relative_to(external.anchor)  # relative
    commands = [
        ["inspect", model],
        ["build", model, "--precision", "fp16", "-o", "out", "-q"],
        ["check", "out/tiny_ext_fp16.json", "--route", "onnxruntime", "--samples", "4"],
        ["compare", model, "out/tiny_ext_fp16.json@onnxruntime", "--samples", "4"],
        ["compare", "--layerwise", model, "out/tiny_ext_fp16.onnx"],
        ["debug", "precision", model, "--precision", "fp16", "--data", "x.npy", "--samples", "6", "--held-out", "6"],
        ["quantize", "sensitivity", model, "--data", "x.npy"],
    ]
    for argv in commands:
        done = run(argv, cwd=elsewhere)
        assert done.returncode == 0, f"trtforge {' '.join(map(str, argv))}:\n{done.stderr[-3000:]}"
        assert "refuse" not in done.stdout, done.stdout[-3000:]


def _loads(tree: ast.AST) -> list[ast.Call]:
    """``onnx.load(...)``/``onnx.load_model(...)``/``ir.load(...)`` calls that read weights too."""
    calls = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        owner = node.func.value.id if isinstance(node.func.value, ast.Name) else ""
        if (owner, node.func.attr) not in {("onnx", "load"), ("onnx", "load_model"), ("ir", "load")}:
            continue
        graph_only = any(k.arg == "load_external_data" and isinstance(k.value, ast.Constant) and k.value.value is False
                         for k in node.keywords)
        if not graph_only:
            calls.append(node)
    return calls


def test_one_loader_reads_onnx_files():
    """No module but the loader reads an ONNX file's weights itself (a second reader would resolve external data,
    size limits and refusals its own way)."""
    sources = {path: path.read_text() for path in sorted(PACKAGE.rglob("*.py")) if path != LOADER}
    found = [f"{path.relative_to(PACKAGE.parent)}:{call.lineno}" for path, text in sources.items()
             if re.search(r"\b(onnx|ir)\.load", text) for call in _loads(ast.parse(text))]
    assert found == [], f"read ONNX files through trtforge.capture.onnx_file.load_onnx: {found}"
