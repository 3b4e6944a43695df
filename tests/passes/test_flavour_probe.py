"""BF16: what the installed TensorRT cannot build in BF16 is found by probe builds and kept in FP32 with
TensorRT's reason, so the BF16 graph builds (mobilenet_v3's HardSwish, a ConvTranspose Myelin refuses)."""

from __future__ import annotations

import json

import numpy as np
import onnx
from onnx import TensorProto, helper

import trtforge
from trtforge.core import trt
from trtforge.passes.float16 import infer_types
from trtforge.passes.graph import load_ir
from trtforge.passes.op_probe import probe_graphs


def _model(tmp_path):
    rng = np.random.default_rng(0)
    w = helper.make_tensor("w", TensorProto.FLOAT, [8, 4, 3, 3], rng.standard_normal(288).astype(np.float32).tolist())
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"], name="relu"),
         helper.make_node("HardSwish", ["r"], ["h"], name="hswish"),
         helper.make_node("ConvTranspose", ["h", "w"], ["y"], name="deconv", strides=[2, 2])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 33, 33])], [w])
    path = tmp_path / "bf16_refusals.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_probe_graphs_are_valid_single_node_bf16_graphs(tmp_path):
    probes = probe_graphs(infer_types(load_ir(_model(tmp_path))), "bfloat16")
    assert sorted(names[0] for names, _ in probes.values()) == ["deconv", "hswish", "relu"]
    for _, proto in probes.values():
        onnx.checker.check_model(proto, full_check=True)
        assert proto.graph.input[0].type.tensor_type.elem_type == TensorProto.BFLOAT16


def test_bf16_build_keeps_what_tensorrt_refuses_with_its_reason(tmp_path):
    cache = tmp_path / "cache"
    art = trtforge.compile(str(_model(tmp_path)), precision="bf16", output_dir=tmp_path / "out", progress=False,
                           cache_dir=cache)
    kept = art.sidecar.precision.fp32_nodes
    assert "HardSwish" in kept.get("hswish", "") and "cannot run it in BF16" in kept["hswish"], kept
    assert "Myelin" in kept.get("deconv", "") and len(kept["deconv"]) < 260, kept
    assert "relu" not in kept, kept
    info = trt.info()
    (table_path,) = (cache / "op_support").glob(f"{info.flavour}-{info.version}-bfloat16.json")
    table = json.loads(table_path.read_text())
    assert any(k.startswith("HardSwish|") and v for k, v in table.items())
    assert any(k.startswith("Relu|") and v is None for k, v in table.items())
