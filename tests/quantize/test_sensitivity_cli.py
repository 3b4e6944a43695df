"""``trtforge quantize sensitivity`` refusals on tiny graphs: nothing to quantize (refused before the data is read; it
crashed with ``zip() argument 2 is longer than argument 1``), too few samples (the fix names the CLI's options in the
CLI, ``QuantConfig``'s fields in Python), and ``--calib-batch-size`` / ``--holdout`` (which the command lacked)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from cli_in_process import run
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

NOTHING_TO_QUANTIZE = "the graph has no Conv, ConvTranspose, MatMul or Gemm layer with float inputs to quantize"


def _reduce_sum(path) -> None:
    """One ReduceSum over a dynamic batch: no layer to quantize."""
    graph = oh.make_graph([oh.make_node("ReduceSum", ["x"], ["y"], keepdims=0)], "reduce",
                          [oh.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                          [oh.make_tensor_value_info("y", TensorProto.FLOAT, [])])
    onnx.save(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)]), path)


def _mlp(path) -> None:
    """Two MatMuls with a Relu between, over a dynamic batch (16 -> 16 -> 8)."""
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), f"w{i}")
               for i, s in enumerate([(16, 16), (16, 8)])]
    nodes = [oh.make_node("MatMul", ["x", "w0"], ["a"]), oh.make_node("Relu", ["a"], ["b"]),
             oh.make_node("MatMul", ["b", "w1"], ["y"])]
    graph = oh.make_graph(nodes, "mlp", [oh.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])],
                          [oh.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])], weights)
    onnx.save(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)]), path)


def _error_lines(done) -> list[str]:
    return [line for line in (done.stdout + done.stderr).splitlines() if line.startswith("error:")]


@pytest.fixture(scope="module")
def graphs(tmp_path_factory):
    """``reduce.onnx`` with ``reduce.npy`` (12 samples: enough, had it anything to quantize), ``mlp.onnx`` with
    ``eight.npy`` (8 samples of its input)."""
    folder = tmp_path_factory.mktemp("sensitivity")
    _reduce_sum(folder / "reduce.onnx")
    np.save(folder / "reduce.npy", np.random.default_rng(2).standard_normal((12, 4)).astype(np.float32))
    _mlp(folder / "mlp.onnx")
    np.save(folder / "eight.npy", np.random.default_rng(1).standard_normal((8, 16)).astype(np.float32))
    return folder


@pytest.mark.parametrize("data", ["missing.npy", "reduce.npy"])
def test_nothing_to_quantize_is_refused_in_one_line_before_the_data_is_read(graphs, data):
    """A ReduceSum-only graph: one ``error:`` line naming ``--precision fp16``, no traceback, whatever the data (a
    file that does not exist is not read: the refusal is still the nothing-to-quantize one; with data that fits,
    calibration crashed on ``zip()``)."""
    done = run(["quantize", "sensitivity", graphs / "reduce.onnx", "--data", graphs / data])
    errors = _error_lines(done)
    assert done.returncode == 2 and len(errors) == 1, done.stdout + done.stderr
    assert NOTHING_TO_QUANTIZE in errors[0] and "--precision fp16" in errors[0]
    assert "Traceback" not in done.stderr and "does not exist" not in done.stderr and "zip()" not in done.stderr


def test_nothing_to_quantize_in_python_names_the_python_fix(graphs):
    from trtforge.core.errors import InvalidArgument
    from trtforge.quantize.sensitivity import sensitivity_table

    with pytest.raises(InvalidArgument, match=NOTHING_TO_QUANTIZE + r".*precision='fp16'"):
        sensitivity_table(onnx.load(graphs / "reduce.onnx"), graphs / "missing.npy", progress=False)


def test_too_few_samples_names_the_cli_options_in_the_cli_and_the_fields_in_python(graphs):
    """8 samples on a dynamic batch: one batch of 8 plus 2 held back needs 10. The CLI's fix names
    ``--calib-batch-size / --holdout`` (it named ``QuantConfig``'s fields); Python's names ``QuantConfig.batch_size``."""
    from trtforge.core.config import QuantConfig
    from trtforge.quantize.data import CalibrationDataError
    from trtforge.quantize.sensitivity import sensitivity_table

    done = run(["quantize", "sensitivity", graphs / "mlp.onnx", "--data", graphs / "eight.npy"])
    errors = _error_lines(done)
    assert done.returncode == 2 and len(errors) == 1, done.stdout + done.stderr
    assert "8 calibration samples are too few" in errors[0] and "needs 10" in errors[0]
    assert "--calib-batch-size / --holdout" in errors[0] and "QuantConfig" not in errors[0]
    with pytest.raises(CalibrationDataError, match=r"needs 10.*QuantConfig\.batch_size / holdout") as refused:
        sensitivity_table(onnx.load(graphs / "mlp.onnx"), np.load(graphs / "eight.npy"), QuantConfig(),
                          progress=False)
    assert "--calib-batch-size" not in str(refused.value)


def test_calib_batch_size_makes_eight_samples_enough(graphs):
    """``--calib-batch-size 4``: one batch of 4 plus 2 held back fit in 8 samples, and the table ranks the
    MLP's block (w0 → w1); ``--holdout`` reaches the split too (0.5 holds back 4: 4 + 4 fit, 0.6 holds back 5: refused)."""
    argv = ["quantize", "sensitivity", graphs / "mlp.onnx", "--data", graphs / "eight.npy", "--calib-batch-size", "4"]
    done = run(argv)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "INT8 sensitivity" in done.stdout and "rel. L2" in done.stdout and "w0 → w1" in done.stdout
    assert run([*argv, "--holdout", "0.5"]).returncode == 0
    held = run([*argv, "--holdout", "0.6"])
    assert held.returncode == 2 and "plus 5 held back" in held.stderr + held.stdout, held.stdout + held.stderr
