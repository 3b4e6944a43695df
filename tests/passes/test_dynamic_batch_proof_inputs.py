"""``--dynamic-batch``'s own proof (batch 2 against two batch-1 runs) feeds distinct, valid rows: it fed all-zero
token ids, so two rows were equal and a graph that mixes rows passed (CLIP text slipped through it). Token ids are
now random within the tables their Gathers read (``passes.index_ranges``), never 0 (issue 35, follow-up)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from trtforge.core.ort_session import session
from trtforge.passes.dynamic_batch import BatchPinned, make_batch_dynamic
from trtforge.passes.graph import load_ir, proto_bytes


def _token_model(path, mix_rows: bool) -> None:
    """ids (1, 4) → embedding (16 × 8) → y; ``mix_rows``: minus the mean over dim 0 (the batch), which is 0 for
    one row and mixes rows for more. A second input, a mask, reads no table."""
    table = numpy_helper.from_array(np.random.default_rng(0).standard_normal((16, 8)).astype(np.float32), "table")
    nodes = [helper.make_node("Gather", ["table", "ids"], ["e"], name="embed"),
             helper.make_node("Cast", ["mask"], ["m"], to=TensorProto.FLOAT),
             helper.make_node("Unsqueeze", ["m", "axis"], ["m3"]), helper.make_node("Mul", ["e", "m3"], ["h"])]
    if mix_rows:
        nodes += [helper.make_node("ReduceMean", ["h", "axis0"], ["mean"], keepdims=1, name="batch_mean"),
                  helper.make_node("Sub", ["h", "mean"], ["y"])]
    else:
        nodes += [helper.make_node("Identity", ["h"], ["y"])]
    consts = [table, numpy_helper.from_array(np.array([2], np.int64), "axis"),
              numpy_helper.from_array(np.array([0], np.int64), "axis0")]
    graph = helper.make_graph(nodes, "tokens", [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 4]),
                                                helper.make_tensor_value_info("mask", TensorProto.INT64, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8])], consts)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)


def test_proof_refuses_a_token_graph_that_mixes_rows(tmp_path):
    _token_model(tmp_path / "mix.onnx", mix_rows=True)
    with pytest.raises(BatchPinned, match="differs from the rows run one batch at a time"):
        make_batch_dynamic(load_ir(tmp_path / "mix.onnx"))


def test_proof_passes_a_token_graph_whose_rows_are_independent(tmp_path):
    """The same embedding without the batch mean: batched, its rows equal batch-1 runs of the file."""
    _token_model(tmp_path / "rows.onnx", mix_rows=False)
    model = make_batch_dynamic(load_ir(tmp_path / "rows.onnx"))
    (tmp_path / "dyn.onnx").write_bytes(proto_bytes(model))
    ids = np.array([[1, 5, 9, 15], [3, 0, 7, 2], [4, 4, 4, 4]], np.int64)
    mask = np.array([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]], np.int64)
    together = session(str(tmp_path / "dyn.onnx")).run(None, {"ids": ids, "mask": mask})[0]
    static = session(str(tmp_path / "rows.onnx"))
    alone = [static.run(None, {"ids": ids[i:i + 1], "mask": mask[i:i + 1]})[0] for i in range(3)]
    np.testing.assert_allclose(together, np.concatenate(alone), rtol=1e-6)
