"""Build item 4 of issue 20: ``--dynamic-batch`` makes a static ONNX file batchable, proven on the reference
(ONNX Runtime at batch N equals N batch-1 runs of the original file, row by row), or refuses in one line
naming the node that pins the batch."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper
from tiny_model import TinyNet

import trtforge
from trtforge.core.ort_session import session
from trtforge.passes.dynamic_batch import BatchPinned, make_batch_dynamic
from trtforge.passes.graph import load_ir, proto_bytes
from trtforge.passes.process import reference_graph


def rows_match_batch_one(static: Path, dynamic: Path, rows: int, shape: tuple[int, ...], name: str,
                         tolerance: float = 1e-4) -> None:
    """``dynamic`` at ``rows`` rows equals ``static`` (the user's batch-1 file) run one row at a time."""
    x = np.random.default_rng(1).standard_normal((rows, *shape)).astype(np.float32)
    together = session(dynamic).run(None, {name: x})[0]
    reference = session(static)
    alone = np.concatenate([reference.run(None, {name: x[i:i + 1]})[0] for i in range(rows)])
    np.testing.assert_allclose(together, alone, rtol=tolerance, atol=tolerance / 10)


def export_static(model: torch.nn.Module, shape: tuple[int, ...], path: Path, name: str) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model.eval(), (torch.randn(1, *shape),), str(path), dynamo=False, input_names=[name],
                          opset_version=17)  # no dynamic_axes: fixed at batch 1, as users' files often are
    return path


@pytest.mark.needs_trt
def test_static_b1_builds_a_1_to_32_profile_whose_batch_8_rows_equal_batch_1(tmp_path):
    torch.manual_seed(0)
    static = export_static(TinyNet(), (3, 16, 16), tmp_path / "model_static_b1.onnx", "x")
    with pytest.raises(ValueError, match="pass dynamic_batch=True"):  # before: "export it with a dynamic batch"
        trtforge.compile(static, batch="1:8:32", output_dir=tmp_path / "out", cache=False, progress=False)
    art = trtforge.compile(static, batch="1:8:32", dynamic_batch=True, output_dir=tmp_path / "out", cache=False,
                           progress=False)
    (profile,) = art.sidecar.profiles
    assert (profile["x"]["min"][0], profile["x"]["opt"][0], profile["x"]["max"][0]) == (1, 8, 32)
    assert art.sidecar.inputs[0].shape[0] == -1 and art.sidecar.outputs[0].shape[0] == -1
    rows_match_batch_one(static, art.reference_onnx_path, 8, (3, 16, 16), "x")
    # The FP16 graph the engine is built from: its rows against the batch-1 FP32 file, at FP16's tolerance.
    rows_match_batch_one(static, art.onnx_path, 8, (3, 16, 16), "x", tolerance=1e-2)
    with trtforge.load(art.sidecar_path, route="onnxruntime") as engine:
        assert engine(np.zeros((32, 3, 16, 16), np.float32))[art.sidecar.outputs[0].name].shape[0] == 32


def test_a_graph_that_mixes_rows_is_refused_naming_the_node(tmp_path):
    path = tmp_path / "pinned.onnx"
    graph = helper.make_graph([helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=1, name="sum_rows")],
                              "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor("axes", TensorProto.INT64, [1], [0])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    with pytest.raises(BatchPinned, match=r"node sum_rows \(ReduceSum\) pins the batch"):
        make_batch_dynamic(reference_graph(load_ir(path)))


def _fold_unfold(path: Path, transpose: bool) -> Path:
    """[1, 4, 2] → (Transpose to [4, 1, 2]) → Reshape "fold" [4, 2] → Relu → Reshape "unfold" [1, 8]."""
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0, 2], name="swap")] if transpose else []
    nodes += [helper.make_node("Reshape", ["t" if transpose else "x", "s1"], ["a"], name="fold"),
              helper.make_node("Relu", ["a"], ["b"], name="r"), helper.make_node("Reshape", ["b", "s2"], ["y"], name="unfold")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
                              [helper.make_tensor("s1", TensorProto.INT64, [2], [4, 2]),
                               helper.make_tensor("s2", TensorProto.INT64, [2], [1, 8])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_a_reshape_that_folds_the_batch_into_its_rows_is_batched(tmp_path):
    """[B, 4, 2] → [4·B, 2] → [B, 8]: the fold's dim 0 is the data's rows × 4 at run time (MobileViT's patches,
    issue 35 item 7); it was refused as pinning the batch."""
    static = _fold_unfold(tmp_path / "fold.onnx", transpose=False)
    (tmp_path / "dynamic.onnx").write_bytes(proto_bytes(make_batch_dynamic(reference_graph(load_ir(static)))))
    rows_match_batch_one(static, tmp_path / "dynamic.onnx", 3, (4, 2), "x")


def test_a_reshape_that_folds_the_batch_into_another_dim_is_refused_naming_it(tmp_path):
    path = _fold_unfold(tmp_path / "fold.onnx", transpose=True)  # the batch is dim 1 of the fold's data
    with pytest.raises(BatchPinned, match=r"dynamic_batch=True: node (swap|fold|unfold) \(\w+\) pins the batch"):
        make_batch_dynamic(reference_graph(load_ir(path)))


def test_a_resize_to_constant_sizes_reads_its_rows_at_run_time(tmp_path):
    """``Resize(x, sizes=[1, 2, 8, 8])`` (MobileViT's bilinear upsampling, dynamo export) pinned the batch at 1."""
    path = tmp_path / "resize.onnx"
    nodes = [helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="linear", name="upsample")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 8, 8])],
                              [helper.make_tensor("sizes", TensorProto.INT64, [4], [1, 2, 8, 8])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    (tmp_path / "dynamic.onnx").write_bytes(proto_bytes(make_batch_dynamic(reference_graph(load_ir(path)))))
    rows_match_batch_one(path, tmp_path / "dynamic.onnx", 3, (2, 4, 4), "x")


@pytest.mark.slow
def test_a_transformers_vit_exported_at_batch_1(tmp_path):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                                    image_size=32, patch_size=8, num_labels=5)
    static = export_static(transformers.ViTForImageClassification(config), (3, 32, 32), tmp_path / "vit.onnx",
                           "pixel_values")
    dynamic = make_batch_dynamic(reference_graph(load_ir(static)))  # the class token's Concat is expanded
    (tmp_path / "vit_dynamic.onnx").write_bytes(proto_bytes(dynamic))
    rows_match_batch_one(static, tmp_path / "vit_dynamic.onnx", 8, (3, 32, 32), "pixel_values")


@pytest.mark.slow
def test_ppocr_recognizer_made_static_then_batched_again(tmp_path):
    rapidocr = pytest.importorskip("rapidocr_onnxruntime")
    proto = onnx.load(Path(rapidocr.__file__).parent / "models" / "ch_PP-OCRv4_rec_infer.onnx")
    for dim, size in zip(proto.graph.input[0].type.tensor_type.shape.dim, (1, 3, 48, 160), strict=True):
        dim.Clear()
        dim.dim_value = size
    static = tmp_path / "rec_static_b1.onnx"
    onnx.save(onnx.shape_inference.infer_shapes(proto), static)
    dynamic = make_batch_dynamic(reference_graph(load_ir(static)))
    (tmp_path / "rec_dynamic.onnx").write_bytes(proto_bytes(dynamic))
    rows_match_batch_one(static, tmp_path / "rec_dynamic.onnx", 3, (3, 48, 160), "x")


def export_dynamo(model: torch.nn.Module, example: torch.Tensor, path: Path, name: str) -> Path:
    """torch's default exporter at batch 1: its Reshapes carry ``allowzero=1`` (issue 35, item 7)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model.eval(), (example,), str(path), dynamo=True, input_names=[name], external_data=False,
                          verbose=False)
    return path


def ids_rows_match_batch_one(static: Path, dynamic: Path, rows: int, name: str) -> None:
    """As ``rows_match_batch_one`` for token ids (the proof's own zeros would hide a row mix-up)."""
    ids = np.random.default_rng(1).integers(0, 100, (rows, 8)).astype(np.int64)
    together = session(dynamic).run(None, {name: ids})
    reference = session(static)
    alone = [reference.run(None, {name: ids[i:i + 1]}) for i in range(rows)]
    for whole, parts in zip(together, zip(*alone, strict=True), strict=True):
        np.testing.assert_allclose(whole, np.concatenate(parts), rtol=1e-4, atol=1e-5)


@pytest.mark.slow
@pytest.mark.needs_trt
def test_dynamo_exported_transformers_with_allowzero_reshapes(tmp_path):
    """Issue 35, item 7: the dynamo exporter's ``Reshape(allowzero=1, shape=[1, -1, ...])`` became ``[0, -1, ...]``,
    which ONNX forbids, and the build was refused as if the graph pinned its batch. CLIP's text model (token ids,
    a causal mask) and YOLOS (a class and detection tokens) at batch 3 equal batch-1 runs of the user's file."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    clip = transformers.CLIPTextModel(transformers.CLIPTextConfig(
        hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32, vocab_size=100,
        max_position_embeddings=8, bos_token_id=0, eos_token_id=1, pad_token_id=1))
    static = export_dynamo(clip, torch.zeros(1, 8, dtype=torch.long), tmp_path / "clip.onnx", "input_ids")
    assert any(a.name == "allowzero" and a.i == 1 for n in onnx.load(static).graph.node for a in n.attribute)
    (tmp_path / "clip_dynamic.onnx").write_bytes(proto_bytes(make_batch_dynamic(reference_graph(load_ir(static)))))
    ids_rows_match_batch_one(static, tmp_path / "clip_dynamic.onnx", 3, "input_ids")

    yolos = transformers.YolosForObjectDetection(transformers.YolosConfig(
        hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32, image_size=[32, 32],
        patch_size=8, num_detection_tokens=2, num_labels=3))
    static = export_dynamo(yolos, torch.randn(1, 3, 32, 32), tmp_path / "yolos.onnx", "pixel_values")
    art = trtforge.compile(static, batch="1:2:3", dynamic_batch=True, precision="fp32", optimization_level=0,
                           output_dir=tmp_path / "out", progress=False)
    assert art.sidecar.inputs[0].shape[0] == -1
    rows_match_batch_one(static, art.reference_onnx_path, 3, (3, 32, 32), "pixel_values")

