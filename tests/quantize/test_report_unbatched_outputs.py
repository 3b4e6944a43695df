"""The INT8 accuracy report on outputs whose dim 0 is not the batch (a transposed ``(classes, N)`` output beside a
batched one): the report crashed ("operands could not be broadcast"); outputs that do not carry the batch in dim 0
are now compared per batch run, every output of a run flattened into one row (issue 35, follow-up)."""

from __future__ import annotations

import numpy as np
import onnx
from cli_in_process import run
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

from trtforge.core.ort_session import session
from trtforge.core.sidecar import read_sidecar
from trtforge.quantize.report import run_model


def _mlp(path, batch) -> None:
    """Three MatMuls (one gets quantized), outputs ``y`` = the logits transposed,
    ``(8, batch)``, and the logits ``e``, ``(batch, 8)``."""
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), f"w{i}")
               for i, s in enumerate([(16, 32), (32, 32), (32, 8)])]
    nodes = [oh.make_node("MatMul", ["x", "w0"], ["a"]), oh.make_node("Relu", ["a"], ["b"]),
             oh.make_node("MatMul", ["b", "w1"], ["c"]), oh.make_node("Relu", ["c"], ["d"]),
             oh.make_node("MatMul", ["d", "w2"], ["e"]), oh.make_node("Transpose", ["e"], ["y"], perm=[1, 0])]
    graph = oh.make_graph(nodes, "mlp", [oh.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 16])],
                          [oh.make_tensor_value_info("y", TensorProto.FLOAT, [8, batch]),
                           oh.make_tensor_value_info("e", TensorProto.FLOAT, [batch, 8])], weights)
    onnx.save(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)]), path)


def test_int8_build_reports_on_a_transposed_output(tmp_path):
    """``build m.onnx --precision int8 --calib c.npz``: exit 0, and the report measured per batch run (batch 1:
    one row per held-back sample), close to FP32."""
    _mlp(tmp_path / "m.onnx", 1)
    np.savez(tmp_path / "c.npz", x=np.random.default_rng(1).standard_normal((16, 16)).astype(np.float32))
    done = run(["build", tmp_path / "m.onnx", "--precision", "int8", "--calib", tmp_path / "c.npz",
                "--allow-unaccelerated", "-o", tmp_path / "out", "-q"])
    assert done.returncode == 0, done.stderr
    quant = read_sidecar(tmp_path / "out" / "m_int8.json").quantization
    assert quant.quantized_layers == 1  # w0; w1 follows the MLP rule, w2 is the final head
    assert quant.measured["samples"] == quant.samples["held_back"] > 0
    assert 0 < quant.measured["rel_l2_max"] < 0.1 and quant.measured["cosine_min"] > 0.99


def test_run_model_rows_are_runs_when_an_output_is_not_batched(tmp_path):
    """A dynamic batch (runs of 3 and 2): each row is one run's outputs, flattened (zeros pad a shorter run, which
    changes no norm or dot product), equal to ONNX Runtime's; all-batched outputs keep one row per sample."""
    _mlp(tmp_path / "m.onnx", "N")
    model = onnx.load(tmp_path / "m.onnx")
    x = np.random.default_rng(2).standard_normal((5, 16)).astype(np.float32)
    batches = [{"x": x[:3]}, {"x": x[3:]}]
    rows = run_model(model, batches)
    reference = session(str(tmp_path / "m.onnx"))
    expected = [np.concatenate([r.ravel() for r in reference.run(None, b)]) for b in batches]
    assert [r.shape for r in rows] == [(2, 24), (2, 24)]  # y: 8 x 3 elements at most, e: 3 x 8
    np.testing.assert_allclose(np.concatenate([rows[0][0], rows[1][0]]), expected[0], rtol=1e-6)
    np.testing.assert_allclose(np.concatenate([rows[0][1, :16], rows[1][1, :16]]), expected[1], rtol=1e-6)
    assert not rows[0][1, 16:].any() and not rows[1][1, 16:].any()
    batched = onnx.load(tmp_path / "m.onnx")
    batched.graph.output.pop(0)  # e alone: (N, 8), one row per sample as before
    assert run_model(batched, batches)[0].shape == (5, 8)


def test_check_and_compare_on_a_transposed_output_with_a_short_last_batch(tmp_path):
    """``check``/``compare`` of a dynamic-batch artifact with a ``(8, N)`` output on 6 samples (batches of 4 and
    2) crashed joining the batches ("all the input array dimensions except for the concatenation axis must
    match"); that output is now judged per batch run, and both pass against the FP32 reference."""
    _mlp(tmp_path / "m.onnx", "N")
    built = run(["build", tmp_path / "m.onnx", "--batch", "1:4:8", "--opt-level", "0", "-o", tmp_path / "out", "-q"])
    assert built.returncode == 0, built.stderr
    artifact = tmp_path / "out" / "m_fp16.json"
    checked = run(["check", artifact, "--route", "onnxruntime", "--samples", "6", "--repeats", "1"])
    assert checked.returncode == 0 and "batch 4" in checked.stdout, checked.stdout + checked.stderr
    compared = run(["compare", tmp_path / "m.onnx", f"{artifact}@onnxruntime", "--samples", "6"])
    assert compared.returncode == 0 and "PASS" in compared.stdout, compared.stdout + compared.stderr
