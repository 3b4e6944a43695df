"""Adaptive average pooling exports to a graph of a few nodes (torch's own decomposition made one Gather
and one Add per window element: 11,636 nodes and minutes for AdaptiveAvgPool2d(3) on 224×224) and matches
PyTorch in ONNX Runtime, at the example batch and another."""

from __future__ import annotations

import io

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

import trtforge
from trtforge.capture.export import export_onnx
from trtforge.capture.translations import pool_matrix


def test_pool_matrix_worked_numbers():
    # PyTorch's windows for 4 → 3: [0, 2), [1, 3), [2, 4); for 5 → 2: [0, 3), [2, 5).
    np.testing.assert_array_equal(pool_matrix(4, 3), [[0.5, 0.5, 0, 0], [0, 0.5, 0.5, 0], [0, 0, 0.5, 0.5]])
    np.testing.assert_allclose(pool_matrix(5, 2), [[1 / 3] * 3 + [0, 0], [0, 0] + [1 / 3] * 3])


@pytest.mark.parametrize(("size", "out", "ops"), [
    ((32, 32), 3, {"MatMul"}),         # old: 305 nodes (Gather, Add)
    ((61, 47), (3, 5), {"MatMul"}),    # windows overlap and differ in size
    ((24, 18), (3, 2), {"AveragePool"}),  # dividing sizes pool with a fixed kernel
])
@pytest.mark.slow
def test_adaptive_avg_pool2d_exports_small_and_matches_pytorch(tmp_path, size, out, ops):
    model = torch.nn.AdaptiveAvgPool2d(out).eval()
    path = export_onnx(model, (torch.randn(2, 4, *size),), tmp_path / "pool.onnx")
    graph = onnx.load(str(path)).graph
    assert len(graph.node) <= 4 and {n.op_type for n in graph.node} == ops, [n.op_type for n in graph.node]
    session = ort.InferenceSession(str(path))
    for batch in (2, 3):
        x = torch.randn(batch, 4, *size)
        (y,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
        torch.testing.assert_close(torch.from_numpy(y), model(x), rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_the_pooled_graph_builds_with_tensorrt(tmp_path):
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.AdaptiveAvgPool2d(3)).eval()
    art = trtforge.compile(model, (torch.randn(1, 3, 30, 23),), precision="fp16", output_dir=tmp_path / "o",
                           progress=False, cache=False)
    assert art.sidecar.outputs[0].shape[1:] == (4, 3, 3)


@pytest.mark.slow
def test_the_export_shows_a_spinner_with_the_elapsed_time(tmp_path):
    from rich.console import Console

    screen = io.StringIO()
    trtforge.compile(torch.nn.AdaptiveAvgPool2d(3).eval(), (torch.randn(1, 2, 20, 20),), precision="fp32",
                     output_dir=tmp_path / "o", cache=False, name="pool",
                     console=Console(file=screen, force_terminal=True, width=120))
    shown = screen.getvalue()
    assert "pool: exporting AdaptiveAvgPool2d to ONNX (torch.onnx)" in shown and "0:00:0" in shown
