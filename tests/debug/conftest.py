"""An artifact the TensorRT double runs (``channel_mean``), with a real reference ONNX beside it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper
from trt_double import write_fake_engine

from trtforge.core.hashing import sha256_file
from trtforge.core.sidecar import read_sidecar, write_sidecar

CHANNEL_MEAN_PROFILE = [{"images": [[1, 3, 8, 8], [4, 3, 8, 8], [8, 3, 8, 8]]}]


def reduce_onnx(path: Path, op: str = "ReduceMean") -> Path:
    """``logits = op(images, axes=(2, 3))``: ReduceMean is what the double's ``channel_mean`` computes."""
    axes = helper.make_tensor("axes", TensorProto.INT64, [2], [2, 3])
    graph = helper.make_graph(
        [helper.make_node(op, ["images", "axes"], ["logits"], keepdims=0, name="pool")], "g",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["n", 3, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["n", 3])], [axes],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    return path


def double_artifact(folder: Path, reference_op: str = "ReduceMean", processed_op: str | None = None) -> Path:
    """The double's engine + a sidecar whose reference ONNX computes ``reference_op`` (and the processed
    graph ``processed_op``, default the same); the sidecar's path."""
    engine = write_fake_engine(folder, CHANNEL_MEAN_PROFILE, feature_dims=(3, 8, 8), model="channel_mean")
    reference = reduce_onnx(folder / "fake_reference_fp32.onnx", reference_op)
    processed = reduce_onnx(folder / "fake_fp32.onnx", processed_op) if processed_op else reference
    sidecar = read_sidecar(engine)
    source = dataclasses.replace(sidecar.source, onnx_file=processed.name, reference_onnx_file=reference.name,
                                 onnx_sha256=sha256_file(processed), reference_onnx_sha256=sha256_file(reference))
    return write_sidecar(engine.with_suffix(".json"), dataclasses.replace(sidecar, source=source))


@pytest.fixture
def fake_artifact(tmp_path) -> Path:
    return double_artifact(tmp_path / "good")
