"""Capture: the dynamo exporter, the TorchScript fallback, and ONNX files with external data."""

from __future__ import annotations

import logging
import os
import signal

import numpy as np
import onnx
import pytest
import torch

import trtforge
from trtforge.builder.build import BuildCancelled, build_engine
from trtforge.builder.progress import BuildProgress
from trtforge.capture.export import export_onnx
from trtforge.capture.onnx_file import graph_io, load_onnx
from trtforge.core.config import CompileConfig
from trtforge.core.ort_session import session


class DataDependent(torch.nn.Module):
    """Branches on a tensor value: torch.export refuses it, the TorchScript tracer takes one branch."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            return x * 2
        return x - 1


@pytest.mark.slow
def test_dynamo_export_names_io_and_dynamic_batch(tmp_path, lite0):
    path = export_onnx(lite0, (torch.zeros(1, 3, 224, 224),), tmp_path / "m.onnx",
                       input_names=["images"], output_names=["logits"])
    inputs, outputs = graph_io(load_onnx(path))
    assert [(s.name, s.shape) for s in inputs] == [("images", (-1, 3, 224, 224))]
    assert [(s.name, s.shape) for s in outputs] == [("logits", (-1, 1000))]
    x = np.random.default_rng(0).standard_normal((3, 3, 224, 224)).astype(np.float32)
    with torch.no_grad():
        ref = lite0(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(session(path).run(None, {"images": x})[0], ref, atol=1e-3, rtol=1e-3)


@pytest.mark.slow
def test_torchscript_fallback_is_logged(tmp_path, caplog):
    x = torch.ones(2, 4)
    with caplog.at_level(logging.WARNING, logger="trtforge.capture.export"):
        path = export_onnx(DataDependent(), (x,), tmp_path / "dd.onnx", input_names=["x"])
    assert any("falling back to the TorchScript exporter" in r.message for r in caplog.records)
    out = session(path).run(None, {"x": np.ones((3, 4), np.float32)})[0]
    np.testing.assert_allclose(out, 2 * np.ones((3, 4)))  # traced branch, dynamic batch kept


@pytest.mark.slow
def test_onnx_with_external_data_is_accepted(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    path = export_onnx(model, (torch.zeros(1, 64),), tmp_path / "mlp.onnx", input_names=["x"])
    proto = onnx.load(str(path))
    ext = tmp_path / "ext"
    ext.mkdir()
    onnx.save_model(proto, str(ext / "mlp.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="mlp.weights", size_threshold=0)
    assert (ext / "mlp.weights").stat().st_size > 64 * 64 * 4
    art = trtforge.compile(ext / "mlp.onnx", precision="fp16", batch=(1, 4, 8), output_dir=tmp_path / "out",
                           progress=False)
    x = np.random.default_rng(1).standard_normal((4, 64)).astype(np.float32)
    with torch.no_grad():
        ref = model(torch.from_numpy(x)).numpy()
    out = session(art.onnx_path).run(None, {"x": x})[0]
    np.testing.assert_allclose(out, ref, atol=2e-2, rtol=2e-2)


def test_ctrl_c_cancels_the_build_cleanly(lite0_onnx, monkeypatch):
    original = BuildProgress.phase_start

    def interrupt_once(self, phase_name, parent_phase, num_steps):
        original(self, phase_name, parent_phase, num_steps)
        if parent_phase is None:
            os.kill(os.getpid(), signal.SIGINT)  # what Ctrl-C sends

    monkeypatch.setattr(BuildProgress, "phase_start", interrupt_once)
    # A background job (`make test &`) inherits SIGINT ignored, and the build rightly leaves an ignored
    # SIGINT alone; this test is about a foreground Ctrl-C, so it starts from Python's own handler.
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(BuildCancelled, match="cancelled by the user"):
            build_engine(lite0_onnx, CompileConfig(precision="fp32"), name="cancel_me", progress=False)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the caller's handler is back
    finally:
        signal.signal(signal.SIGINT, inherited)


@pytest.mark.slow
def test_fallback_warning_carries_no_terminal_codes(caplog, tmp_path):
    """The dynamo exporter's errors can carry ANSI colours; the fallback warning is plain text for logs."""
    from trtforge.capture.export import export_onnx

    class ColouredFailure(torch.nn.Module):
        def forward(self, x):
            if torch.compiler.is_compiling():  # only under the dynamo exporter; TorchScript traces through
                raise RuntimeError("\x1b[1;31mConstraintViolationError\x1b[0m: size()[0] = 4\nIR dump ...")
            return x + 1

    with caplog.at_level(logging.WARNING, logger="trtforge"):
        export_onnx(ColouredFailure(), (torch.ones(1, 3),), tmp_path / "m.onnx")
    warnings = [r.getMessage() for r in caplog.records if "falling back" in r.getMessage()]
    assert warnings == [
        "dynamo ONNX export failed (RuntimeError: ConstraintViolationError: size()[0] = 4); "
        "falling back to the TorchScript exporter"
    ]
    assert onnx.load(str(tmp_path / "m.onnx")).graph.node


def test_plain_strips_terminal_codes():
    from trtforge.core.errors import plain

    assert plain("\x1b[1;31mError\x1b[0m: bad \x1b[2Kline") == "Error: bad line"


@pytest.mark.slow
def test_output_name_that_an_inner_value_already_has_is_kept_and_the_graph_stays_valid(tmp_path):
    """MiniLM's sentence output is named 'embedding', and the dynamo export also names the output of its
    aten.embedding node 'embedding': the export must not hand ONNX a graph with two values of one name."""

    class Lookup(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.table = torch.nn.Embedding(10, 4)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.table(ids).mean(1)

    model = Lookup().eval()
    ids = torch.tensor([[1, 2, 3], [4, 5, 6]])
    path = export_onnx(model, (ids,), tmp_path / "m.onnx", input_names=["ids"], output_names=["embedding"])
    proto = onnx.load(path)
    onnx.checker.check_model(proto, full_check=True)
    assert [o.name for o in proto.graph.output] == ["embedding"]
    out = session(path).run(None, {"ids": ids.numpy()})[0]
    np.testing.assert_allclose(out, model(ids).detach().numpy(), rtol=1e-6)
