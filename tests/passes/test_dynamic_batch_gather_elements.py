"""``--dynamic-batch`` on RoBERTa-style token types: ``torch.gather(buffer.expand(batch, -1), 1, positions)``
exported at batch 1 leaves a GatherElements whose data is the batch-1 buffer; at batch 2 ONNX Runtime refused it
(XLM-RoBERTa, both exporters, was refused as pinning the batch). The rewrite expands that data to the rows of the
indices, and the batched graph's rows equal batch-1 runs of the user's file."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from trtforge.core.ort_session import session
from trtforge.passes.dynamic_batch import make_batch_dynamic
from trtforge.passes.graph import load_ir, proto_bytes


def _token_types(path, folded: bool):
    """ids [1, 16] -> word embeddings + type embeddings, the types read by GatherElements from a batch-1 table:
    ``folded`` as the dynamo exporter writes it (the expanded buffer an initializer), else as TorchScript does
    (``Expand(buffer, shape)`` with the shape computed from constants: ConstantOfShape, Where)."""
    f, i64 = TensorProto.FLOAT, TensorProto.INT64
    rng = np.random.default_rng(0)
    table = (np.arange(40) % 2).reshape(1, 40).astype(np.int64)
    init = [numpy_helper.from_array(rng.standard_normal((40, 4)).astype(np.float32), "words"),
            numpy_helper.from_array(rng.standard_normal((2, 4)).astype(np.float32), "types"),
            numpy_helper.from_array(np.array(1, np.int64), "one"),
            numpy_helper.from_array(np.array([1], np.int64), "axis1")]
    nodes = [helper.make_node("Gather", ["words", "ids"], ["w"]),
             helper.make_node("Shape", ["ids"], ["ids_shape"]),
             helper.make_node("ConstantOfShape", ["ids_shape"], ["ones"], value=numpy_helper.from_array(
                 np.array([1], np.int64))),
             helper.make_node("CumSum", ["ones", "one"], ["count"]),
             helper.make_node("Sub", ["count", "one"], ["positions"]),
             helper.make_node("GatherElements", ["table", "positions"], ["type_ids"], axis=1),
             helper.make_node("Gather", ["types", "type_ids"], ["t"]),
             helper.make_node("Add", ["w", "t"], ["y"])]
    if folded:
        init.append(numpy_helper.from_array(table, "table"))
    else:
        init += [numpy_helper.from_array(table, "buffer"), numpy_helper.from_array(np.array([2], np.int64), "rank")]
        nodes[:0] = [helper.make_node("ConstantOfShape", ["rank"], ["target"], value=numpy_helper.from_array(
                         np.array([1], np.int64))),  # [1, 1]: the batch-1 expand, computed from constants
                     helper.make_node("Expand", ["buffer", "target"], ["table"])]
    graph = helper.make_graph(nodes, "token_types", [helper.make_tensor_value_info("ids", i64, [1, 16])],
                              [helper.make_tensor_value_info("y", f, [1, 16, 4])], init)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.mark.parametrize("folded", [True, False], ids=["dynamo", "torchscript"])
def test_a_batch_one_gather_elements_table_is_expanded_to_the_rows(tmp_path, folded):
    path = _token_types(tmp_path / "types.onnx", folded)
    model = make_batch_dynamic(load_ir(path))  # refused before: "node ... (GatherElements) pins the batch"
    ids = np.random.default_rng(1).integers(0, 40, (3, 16)).astype(np.int64)
    together = session(proto_bytes(model)).run(None, {"ids": ids})[0]
    reference = session(path.read_bytes())
    alone = np.concatenate([reference.run(None, {"ids": ids[i:i + 1]})[0] for i in range(3)])
    np.testing.assert_allclose(together, alone, rtol=1e-6, atol=1e-6)
