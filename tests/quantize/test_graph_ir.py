"""One graph IR, one op registry: passes and quantize read the same onnx_ir graph the same way."""

from __future__ import annotations

import importlib
import pkgutil

import numpy as np
import onnx
import onnx_ir as ir
from onnx import TensorProto, helper, numpy_helper

import trtforge.passes
import trtforge.quantize
from trtforge.passes import ops
from trtforge.passes.float16 import plan_float
from trtforge.passes.graph import dtype_summary, has_qdq, load_ir, proto_bytes
from trtforge.passes.process import process
from trtforge.passes.qdq import apply_plan
from trtforge.quantize.calibration import build_full_plan
from trtforge.quantize.coverage import int8_layers
from trtforge.quantize.placement import analyse


def _graph() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(0, 0.1, (32, 32, 3, 3)).astype(np.float32), "conv.weight"),
             numpy_helper.from_array(rng.normal(0, 0.1, (16, 2048)).astype(np.float32), "fc.weight"),
             numpy_helper.from_array(rng.normal(0, 0.1, (16, 16)).astype(np.float32), "proj.weight"),
             numpy_helper.from_array(np.ones(16, np.float32), "ln.scale"),
             numpy_helper.from_array(np.zeros(16, np.float32), "ln.bias")]
    nodes = [helper.make_node("Conv", ["x", "conv.weight"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Flatten", ["r"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "fc.weight"], ["g"], transB=1, name="fc"),
             helper.make_node("MatMul", ["g", "proj.weight"], ["m"], name="proj"),
             helper.make_node("LayerNormalization", ["m", "ln.scale", "ln.bias"], ["y"], name="ln")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 32, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 16])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


def test_op_kinds_are_defined_once():
    """Every module of passes and quantize that names an op set of the registry holds the registry's object."""
    registry = {"MAC_OPS": ops.MAC_OPS, "QDQ_OPS": ops.QDQ_OPS, "SHAPE_OPS": ops.SHAPE_OPS,
                "NORMALIZATION_OPS": ops.NORMALIZATION_OPS, "NONLINEAR_OPS": ops.NONLINEAR_OPS}
    seen = 0
    for package in (trtforge.passes, trtforge.quantize):
        for info in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
            module = importlib.import_module(info.name)
            for name, value in vars(module).items():
                if name in registry:
                    assert value is registry[name], f"{info.name}.{name} is a second definition"
                    seen += 1
                elif isinstance(value, frozenset) and value in registry.values():
                    raise AssertionError(f"{info.name}.{name} repeats a registry op set under another name")
    assert seen >= 5  # placement, coverage, float16, graph ... really read the registry


def test_passes_and_quantize_classify_the_same_graph_alike():
    model = load_ir(_graph())
    mac_nodes = {node.outputs[0].name for node in model.graph if ops.op_kind(node.op_type) == "mac"}
    analysis = analyse(model)
    assert {c.output for c in analysis.candidates} == mac_nodes == {"c", "g", "m"}
    # The float pass keeps the registry's normalisations in FP32.
    kept = plan_float(load_ir(_graph()), "float16").fp32_nodes
    assert set(kept) == {node.name for node in model.graph if ops.op_kind(node.op_type) == "normalization"}
    # A frozen plan applied by passes: quantize's coverage, the passes' Q/DQ test and dtype summary agree.
    amax = {name: 1.0 for c in analysis.candidates for _, name in c.activations}
    shapes = {"c": (1, 32, 8, 8), "g": (1, 16), "m": (1, 16), "x": (1, 32, 8, 8), "f": (1, 2048)}
    plan = build_full_plan(model, analysis, amax, shapes, "max")
    assert not has_qdq(model) and int8_layers(model) == set()
    qdq = apply_plan(model, plan)
    assert has_qdq(qdq) and int8_layers(qdq) == mac_nodes
    assert dtype_summary(qdq)["int8"] == sum(n.op_type == "QuantizeLinear" for n in qdq.graph)
    assert not has_qdq(model)  # apply_plan copies


def test_process_is_deterministic_and_leaves_its_input_alone():
    reference = load_ir(_graph())
    before = proto_bytes(reference)
    analysis = analyse(reference)
    amax = {name: 1.0 for c in analysis.candidates for _, name in c.activations}
    plan = build_full_plan(reference, analysis, amax, {"c": (1, 32, 8, 8), "g": (1, 16), "m": (1, 16)}, "max")
    for precision, plan_arg in (("fp32", None), ("fp16", None), ("bf16", None), ("int8", plan)):
        first, second = process(reference, precision, plan_arg), process(reference, precision, plan_arg)
        assert proto_bytes(first.model) == proto_bytes(second.model)
        assert proto_bytes(reference) == before
    int8 = process(reference, "int8", plan)
    assert int8.built_precision == "int8" and has_qdq(int8.model)
    # FP16 scales in the TensorRT graph: the scale takes the dtype of the tensor it quantizes.
    scales = [v.const_value.dtype for name, v in int8.model.graph.initializers.items() if name.endswith("_scale")]
    assert scales and set(scales) == {ir.DataType.FLOAT16}
