"""The capability table's answers (pinned), the Q/DQ patterns read from hand-made graphs, the one-line
refusals, and real TensorRT-RTX builds of every cell the table says builds."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from trtforge.builder.capability import (
    DOC_BEGIN,
    DOC_END,
    QuantizedLayer,
    accelerated_classes,
    cell,
    default_targets,
    markdown,
    plan_layers,
    plan_precision,
    runs_as,
)
from trtforge.builder.capability_probe import PROBED, probe_graph, probe_refusal
from trtforge.builder.quantized_layers import quantized_layers
from trtforge.core import trt

RTX, RTX_VERSION = "tensorrt_rtx", "1.7.1.116"

#: (target, op class, scheme) → state on TensorRT-RTX 1.7: the support matrix (INT8/INT4 only weight-only
#: GEMM on 8.6+, FP8 on 8.9 and 12.x) and the 1.7 release notes (FP8 and INT8 weight-only convolutions).
RTX_CELLS = {
    ("sm86", "conv", "int8"): "emulated", ("sm86", "gemm", "int8"): "emulated",
    ("sm89", "conv", "int8"): "emulated", ("sm89", "gemm", "int8"): "emulated",
    ("sm120", "conv", "int8"): "emulated", ("sm120", "gemm", "int8"): "emulated",
    ("sm86", "conv", "int8_wo"): "accelerated", ("sm86", "gemm", "int8_wo"): "accelerated",
    ("sm89", "conv", "int8_wo"): "accelerated", ("sm89", "gemm", "int8_wo"): "accelerated",
    ("sm120", "conv", "int8_wo"): "accelerated", ("sm120", "gemm", "int8_wo"): "accelerated",
    ("sm86", "conv", "fp8"): "refused", ("sm86", "gemm", "fp8"): "refused",
    ("sm89", "conv", "fp8"): "accelerated", ("sm89", "gemm", "fp8"): "accelerated",
    ("sm120", "conv", "fp8"): "accelerated", ("sm120", "gemm", "fp8"): "accelerated",
}


@pytest.mark.parametrize(("target", "op_class", "scheme"), sorted(RTX_CELLS))
def test_tensorrt_rtx_cells_are_pinned(target, op_class, scheme):
    got = cell(RTX, RTX_VERSION, target, op_class, scheme, "fp16")
    assert got.state == RTX_CELLS[target, op_class, scheme], got
    assert got.runs_as == {"accelerated": scheme, "emulated": "fp16", "refused": "-"}[got.state]


def test_tensorrt_rtx_before_1_7_runs_no_quantized_convolution():
    assert cell(RTX, "1.6.0", "sm89", "conv", "fp8", "fp16").state == "refused"
    assert cell(RTX, "1.6.0", "sm89", "conv", "int8_wo", "fp16").state == "emulated"
    assert cell(RTX, "1.6.0", "sm89", "gemm", "fp8", "fp16").state == "accelerated"


#: Full TensorRT 10.9: target → what a convolution and a GEMM run as.
FULL = {
    "sm80": ({"fp32", "fp16", "bf16", "int8"}, {"fp32", "fp16", "bf16", "int8", "int8_wo", "int4_wo"}),
    "sm89": ({"fp32", "fp16", "bf16", "int8", "fp8"}, {"fp32", "fp16", "bf16", "int8", "int8_wo", "int4_wo", "fp8"}),
    "sm90": ({"fp32", "fp16", "bf16", "int8", "fp8"}, {"fp32", "fp16", "bf16", "int8", "int8_wo", "int4_wo", "fp8"}),
    "sm100": ({"fp32", "fp16", "bf16", "int8", "fp8"},
              {"fp32", "fp16", "bf16", "int8", "int8_wo", "int4_wo", "fp8", "fp4"}),
}


@pytest.mark.parametrize("target", sorted(FULL))
def test_full_tensorrt_rows_are_pinned(target):
    conv, gemm = FULL[target]
    assert runs_as("tensorrt", "10.9.0", target, "conv") == conv
    assert runs_as("tensorrt", "10.9.0", target, "gemm") == gemm
    assert "fp4" not in runs_as("tensorrt", "10.7.0", target, "gemm")  # FP4 came with 10.8
    if target in ("sm90", "sm100"):  # data-centre Hopper and Blackwell: TensorRT-RTX does not run there
        assert runs_as("tensorrt_rtx", RTX_VERSION, target, "gemm") == set()
        assert cell("tensorrt_rtx", RTX_VERSION, target, "gemm", "int8_wo", "fp16").state == "refused"


def test_accelerated_classes_are_those_every_target_accelerates():
    assert accelerated_classes("fp8", RTX, "1.6.0", ("sm89", "sm120")) == ("gemm",)
    assert accelerated_classes("fp8", RTX, RTX_VERSION, ("sm89", "sm120")) == ("conv", "gemm")
    assert accelerated_classes("fp8", RTX, RTX_VERSION, ("sm86", "sm89")) == ()
    assert accelerated_classes("int8", RTX, RTX_VERSION, ("sm89",)) == ()
    assert accelerated_classes("int8", "tensorrt", "10.9.0", ("sm80", "sm90")) == ("conv", "gemm")


def test_default_targets_are_the_rtx_portable_set_or_the_local_gpus():
    assert default_targets(RTX, offered=("sm75", "sm80", "sm86", "sm89", "sm120", "sm121")) == (
        "sm86", "sm89", "sm120", "sm121")
    assert default_targets("tensorrt", local=("sm90", "sm90")) == ("sm90",)


def test_int8_on_tensorrt_rtx_is_refused_in_one_line_naming_what_to_use():
    line = plan_precision("int8", RTX, RTX_VERSION, ("sm86", "sm89", "sm120"), "fp16").refusal()
    assert line.startswith("TensorRT-RTX runs INT8 only as weight-only GEMM: ")
    assert "fp16 on sm86, sm89, sm120" in line
    assert "--precision int8-wo, --precision fp8 --target sm89,sm120, or full TensorRT for W8A8" in line
    assert "\n" not in line
    assert plan_precision("int8", RTX, RTX_VERSION, ("sm86",), "fp16").refusal(allow_unaccelerated=True) is None
    assert plan_precision("int8", "tensorrt", "10.9.0", ("sm80",), "fp16").refusal() is None


def test_fp8_with_sm86_among_the_targets_is_refused_even_when_allowed():
    plan = plan_precision("fp8", RTX, RTX_VERSION, ("sm86", "sm89", "sm120"), "fp16")
    line = plan.refusal(allow_unaccelerated=True)
    assert "cannot be built for sm86" in line and "--target sm89,sm120" in line
    assert plan_precision("fp8", RTX, RTX_VERSION, ("sm89", "sm120"), "fp16").refusal() is None
    assert plan_precision("int8-wo", RTX, RTX_VERSION, ("sm86", "sm89", "sm120"), "fp16").refusal() is None
    assert plan_precision("fp16", RTX, RTX_VERSION, ("sm86",), "fp16").refusal() is None


def test_a_refusing_probe_turns_an_accelerated_cell_into_refused():
    layers = [QuantizedLayer("mm", "MatMul", "int8_wo")]

    def probe(op_class, scheme, target):
        return "no kernel" if target == "sm89" else None

    plan = plan_layers(layers, RTX, RTX_VERSION, ("sm86", "sm89"), "fp16", probe)
    assert [c.state for c in plan.layers[0].cells] == ["accelerated", "refused"]
    assert "no kernel" in plan.refusal()


# -- Q/DQ patterns, hand-made ----------------------------------------------------------------------
def _model(nodes, inits, x_shape, y_shape, opset, dtype=TensorProto.FLOAT):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", dtype, x_shape)],
                              [helper.make_tensor_value_info("y", dtype, y_shape)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def _run(model: onnx.ModelProto) -> np.ndarray:
    """The graph in ONNX Runtime (the reference that it is a real, runnable quantized graph)."""
    onnx.checker.check_model(model, full_check=True)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    dtype = np.float16 if model.graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT16 else np.float32
    return session.run(None, {"x": np.ones(shape, dtype)})[0]


def _int4_blocked_matmul() -> onnx.ModelProto:
    """A MatMul whose weight is an INT4 initializer behind a blocked DequantizeLinear (opset 21)."""
    w = helper.make_tensor("w", TensorProto.INT4, [64, 8], np.tile(np.arange(-4, 4), 64).tolist())
    scale = numpy_helper.from_array(np.full((2, 8), 0.1, np.float32), "s")
    nodes = [helper.make_node("DequantizeLinear", ["w", "s"], ["wf"], axis=0, block_size=32),
             helper.make_node("MatMul", ["x", "wf"], ["y"])]
    return _model(nodes, [w, scale], [2, 64], [2, 8], 21)


def _fp8_qdq_matmul() -> onnx.ModelProto:
    """FLOAT8E4M3FN Q/DQ on the activation and an FP8 weight behind a DequantizeLinear (opset 19)."""
    w = helper.make_tensor("w", TensorProto.FLOAT8E4M3FN, [16, 4], [1.0] * 64)
    inits = [w, numpy_helper.from_array(np.array(0.5, np.float32), "ws"),
             numpy_helper.from_array(np.array(0.1, np.float32), "xs"),
             helper.make_tensor("xz", TensorProto.FLOAT8E4M3FN, [], [0.0])]
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w", "ws"], ["wd"]),
             helper.make_node("Transpose", ["wd"], ["wt"], perm=[1, 0]),
             helper.make_node("Transpose", ["wt"], ["wt2"], perm=[1, 0]),
             helper.make_node("MatMul", ["xd", "wt2"], ["y"])]
    return _model(nodes, inits, [2, 16], [2, 4], 19)


def _int8_w8a8_conv_and_float_matmul() -> onnx.ModelProto:
    """An INT8 Q/DQ convolution (activation and weight), then a float MatMul left alone."""
    w = numpy_helper.from_array(np.ones((4, 3, 1, 1), np.int8), "w")
    inits = [w, numpy_helper.from_array(np.full(4, 0.1, np.float32), "ws"),
             numpy_helper.from_array(np.array(0.1, np.float32), "xs"),
             numpy_helper.from_array(np.array(0, np.int8), "xz"),
             numpy_helper.from_array(np.ones((8, 2), np.float32), "m")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w", "ws"], ["wd"], axis=0),
             helper.make_node("Conv", ["xd", "wd"], ["c"], name="conv"),
             helper.make_node("MatMul", ["c", "m"], ["y"], name="float_mm")]
    return _model(nodes, inits, [1, 3, 8, 8], [1, 4, 8, 2], 19)


PATTERN_CASES = {
    "int4 blocked weight-only MatMul": (_int4_blocked_matmul, [("MatMul", "int4_wo")]),
    "fp8 Q/DQ MatMul (weight through Transposes)": (_fp8_qdq_matmul, [("MatMul", "fp8")]),
    "int8 W8A8 Conv, float MatMul": (_int8_w8a8_conv_and_float_matmul, [("Conv", "int8")]),
}


@pytest.mark.parametrize("case", sorted(PATTERN_CASES))
def test_quantized_layers_read_the_qdq_pattern_of_real_graphs(case):
    make, expected = PATTERN_CASES[case]
    model = make()
    assert np.isfinite(_run(model)).all()  # ONNX Runtime runs it: a real FP8 / INT4 / INT8 graph
    assert [(layer.op_type, layer.scheme) for layer in quantized_layers(ir.from_proto(model))] == expected


@pytest.mark.parametrize(("op_class", "scheme"), [(c, s) for c in ("conv", "gemm") for s in PROBED])
def test_probe_graphs_run_in_onnx_runtime_and_read_back_as_their_scheme(op_class, scheme):
    model = probe_graph(op_class, scheme)
    assert np.isfinite(_run(model).astype(np.float32)).all()
    assert [layer.scheme for layer in quantized_layers(ir.from_proto(model))] == [scheme]


# -- real TensorRT-RTX builds ---------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.skipif(not trt.available() or not trt.info().is_rtx, reason="needs TensorRT-RTX")
@pytest.mark.parametrize(("target", "op_class", "scheme"),
                         sorted(k for k in RTX_CELLS if k[2] in PROBED))
def test_every_cell_the_table_says_builds_builds_with_tensorrt_rtx(target, op_class, scheme):
    """A real build per cell for that target: 'accelerated' and 'emulated' cells build, 'refused' ones
    are refused by the builder itself (FP8 on sm86: a HW-specific datatype)."""
    version = trt.info().version
    reason = probe_refusal(op_class, scheme, target)
    state = cell(RTX, version, target, op_class, scheme, "fp16").state
    if state == "refused":
        assert reason is not None and "HW-specific datatypes" in reason, reason
    else:
        assert reason is None, reason


def test_the_docs_table_is_the_generated_one():
    """docs/quantization.md's "which precision for which GPU" block is ``markdown()``'s text; regenerate it
    with ``python -m trtforge.builder.capability`` after a table change."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "quantization.md").read_text()
    begin, end = page.index(DOC_BEGIN), page.index(DOC_END) + len(DOC_END)
    assert page[begin:end] == markdown()
    assert page.index("## Which precision for which GPU") < begin < page.index("## When INT8 pays off")
