"""TensorRT's refusals reach the user as one line: the user's model, the node, the op and the reason."""

from __future__ import annotations

import logging

import onnx
import pytest
from onnx import TensorProto, helper

import trtforge
from trtforge.builder.build import OnnxParseError, RecordingLogger, tensorrt_reasons
from trtforge.core import trt
from trtforge.passes.graph import load_ir
from trtforge.passes.process import process


def _one_op(tmp_path, op: str, name: str) -> str:
    graph = helper.make_graph([helper.make_node(op, ["x"], ["y"], name=name)], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 3])],
                              # a shape field is required on graph outputs (the ONNX checker refuses its absence)
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [] if op == "Det" else ["n"])])
    path = tmp_path / f"my_{op.lower()}_model.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return str(path)


def test_a_parse_error_is_one_line_naming_the_users_model_node_and_reason(tmp_path):
    with pytest.raises(OnnxParseError) as info:
        trtforge.compile(_one_op(tmp_path, "Det", "determinant"), precision="fp32", output_dir=tmp_path / "o",
                         progress=False, cache=False)
    message = str(info.value)
    assert "\n" not in message, message
    assert "my_det_model.onnx" in message and "processed.onnx" not in message, message
    assert "'determinant' (Det)" in message and "UNSUPPORTED_NODE" in message, message


def test_a_second_build_reports_only_its_own_errors(tmp_path):
    """TensorRT keeps the first builder's logger for the process ("the current new logger is ignored"):
    whichever logger TensorRT calls, the build that is running records the message."""
    first, second = RecordingLogger(), RecordingLogger()
    severity = trt.bindings().ILogger.Severity.ERROR
    with second.active():
        first.trt_logger.log(severity, "Myelin refused node_7")
    assert second.errors() == ["Myelin refused node_7"] and first.errors() == []
    for op in ("Det", "Unique"):
        with pytest.raises(OnnxParseError) as info:
            trtforge.compile(_one_op(tmp_path, op, f"node_{op}"), precision="fp32", output_dir=tmp_path / op,
                             progress=False, cache=False)
        other = "Unique" if op == "Det" else "Det"
        assert op in str(info.value) and other not in str(info.value), str(info.value)


def test_tensorrt_reasons_drop_repeats_and_unrelated_cuda_lines():
    messages = [
        "ModelImporter.cpp:140: While parsing node number 0 [Det -> \"y\"]:",
        "[defaultAllocator.cpp::allocate::31] Error Code 1: Cuda Runtime (cudaError 35: CUDA driver version is "
        "insufficient for CUDA runtime version)",
        "Myelin refused the graph: GroupQueryAttention\nTraceback (most recent call last):\n  File x\n  line y",
        "Myelin refused the graph: GroupQueryAttention\nTraceback (most recent call last):\n  File x\n  line y",
    ]
    assert tensorrt_reasons(messages) == [
        "ModelImporter.cpp:140: While parsing node number 0 [Det -> \"y\"]:",
        "Myelin refused the graph: GroupQueryAttention",
    ]


def test_shape_inference_failure_is_not_printed_before_the_real_work(caplog):
    graph = helper.make_graph([helper.make_node("MeanVarianceNormalization", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 4, 4])])
    model = load_ir(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    with caplog.at_level(logging.DEBUG):
        processed = process(model, "fp16")
    assert not [r for r in caplog.records if "Shape inference failed" in r.getMessage()]
    assert processed.float_plan.fp32_nodes


def test_an_error_outside_a_node_names_the_input_and_its_reader(tmp_path):
    graph = helper.make_graph([helper.make_node("Pow", ["x", "y"], ["z"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3]),
                               helper.make_tensor_value_info("y", TensorProto.UINT32, [3])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, [3])])
    path = tmp_path / "pow_uint32.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)]), str(path))
    with pytest.raises(OnnxParseError) as info:
        trtforge.compile(str(path), precision="fp32", output_dir=tmp_path / "o", progress=False, cache=False)
    assert "node 'input y' (Pow)" in str(info.value), str(info.value)


def test_a_build_error_holds_no_tensorrt_builder(tmp_path):
    """A builder freed by a later garbage collection, inside another build's logger callback, deadlocks
    TensorRT (bench/conformance.py hung on its first refusal); errors leave build_engine without it."""
    from trtforge.builder.build import build_engine
    from trtforge.core.config import CompileConfig

    with pytest.raises(OnnxParseError) as info:
        build_engine(_one_op(tmp_path, "Det", "det"), CompileConfig(precision="fp32"), name="det", progress=False)
    builder_type = trt.bindings().Builder
    tb = info.value.__traceback__
    while tb is not None:
        assert not any(isinstance(v, builder_type) for v in tb.tb_frame.f_locals.values()), tb.tb_frame.f_code
        tb = tb.tb_next


def test_a_parse_reason_keeps_the_real_line_beside_a_cuda_line():
    """The parser's description of an invalid node puts the cause on its second line, among cudaError 35 lines."""
    from types import SimpleNamespace

    from trtforge.builder.build import _parser_reason

    err = SimpleNamespace(
        desc=lambda: "Invalid Node - node\nShape Error (squeeze axis is not a constant)\n[checkMacros.cpp] "
                     "(cudaError 35: CUDA driver version is insufficient for CUDA runtime version)",
        code=lambda: SimpleNamespace(name="INVALID_NODE"), func=lambda: "parseNode")
    assert _parser_reason(err) == "INVALID_NODE: Invalid Node - node: Shape Error (squeeze axis is not a constant)"


def test_once_the_build_is_over_tensorrt_messages_reach_the_log_at_their_own_level(caplog):
    """TensorRT keeps the builder's recording logger for the process: a runtime error after the build
    must reach the user's log as an error (it was logged at DEBUG, so 'the log above' showed nothing)."""
    caplog.set_level(logging.DEBUG, logger="trtforge")
    logger = RecordingLogger()
    severity = trt.bindings().ILogger.Severity
    with logger.active():
        logger.trt_logger.log(severity.ERROR, "during the build: Myelin refused node_7")
    logger.trt_logger.log(severity.ERROR, "after: IExecutionContext::enqueueV3: Error Code 1")
    logger.trt_logger.log(severity.WARNING, "after: a warning")
    logger.trt_logger.log(severity.INFO, "after: some info")

    def levels(text: str) -> list[int]:
        return [r.levelno for r in caplog.records if text in r.getMessage()]

    assert levels("during the build") == [logging.DEBUG]  # the build's own error message names it once
    assert levels("enqueueV3: Error Code 1") == [logging.ERROR]
    assert levels("after: a warning") == [logging.WARNING] and levels("some info") == []
    assert logger.errors() == ["during the build: Myelin refused node_7"]
