"""Large initializers reach ONNX Runtime as shared OrtValues (trtforge/core/ort_weights.py): the sessions compute
what the inline graph computes, the caller's graph is left as it was, and a session outlives the cache's copy."""

from __future__ import annotations

import gc

import numpy as np
import onnx
import onnx_ir as ir
from onnx import TensorProto as P
from onnx import helper as h
from onnx import numpy_helper as nh

from trtforge.core import ort_weights
from trtforge.core.ort_session import session as session_of
from trtforge.passes.graph import ort_session


def _model(seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    weight = rng.standard_normal((1024, 512)).astype(np.float32)  # 2 MiB: shared
    bias = rng.standard_normal(512).astype(np.float32)  # 2 KiB: stays in the graph
    nodes = [h.make_node("MatMul", ["x", "w"], ["y"]), h.make_node("Add", ["y", "b"], ["z"])]
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", P.FLOAT, [2, 1024])],
                         [h.make_tensor_value_info("z", P.FLOAT, [2, 512])], [nh.from_array(weight, "w"),
                                                                              nh.from_array(bias, "b")])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


def test_shared_sessions_compute_what_the_inline_graph_computes_and_leave_the_callers_graph_alone():
    proto = _model()
    before = proto.SerializeToString()
    x = np.random.default_rng(1).standard_normal((2, 1024)).astype(np.float32)
    inline = session_of(before, memory_arena=False).run(None, {"x": x})  # the same settings, weights inline
    session = ort_session(proto)
    assert isinstance(session, ort_weights.SharedWeightsSession)
    assert sorted(session.shared_initializers) == ["w"]  # the bias is under the threshold
    np.testing.assert_array_equal(session.run(None, {"x": x})[0], inline[0])
    _, y = ort_session(proto, extra_outputs=["y"]).run(None, {"x": x})  # an observer's extra output
    np.testing.assert_allclose(y, x @ nh.to_array(proto.graph.initializer[0]), rtol=1e-4, atol=1e-4)
    assert proto.SerializeToString() == before
    again = ort_session(ir.from_proto(proto))  # the same weights from onnx_ir: the same OrtValue
    assert again.shared_initializers["w"] is session.shared_initializers["w"]


def test_a_session_keeps_its_weights_after_the_cache_lets_them_go():
    x = np.ones((2, 1024), np.float32)
    expected = session_of(_model(2).SerializeToString(), memory_arena=False).run(None, {"x": x})[0]
    session = ort_session(_model(2))
    ort_weights._values.clear()  # what the LRU does to old entries
    for seed in range(3, 6):  # new weights reuse freed memory if the session did not hold its own
        ort_session(_model(seed)).run(None, {"x": x})
    gc.collect()
    np.testing.assert_array_equal(session.run(None, {"x": x})[0], expected)
