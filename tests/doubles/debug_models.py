"""Small real models and artifacts for the debug tests: the double's artifact with a real reference ONNX,
a graph FP16 breaks through one constant, and a graph INT8 breaks through one layer's outlier input."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
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


def timed_double(folder: Path, precision: str, latency_ms: float) -> Path:
    """``double_artifact``'s engine as the ``precision`` build of model ``fake`` (``fake_<precision>.json``),
    each run taking ``latency_ms`` (the double's recorded timing); the sidecar's path."""
    sidecar = read_sidecar(double_artifact(folder / f"work_{precision}"))
    engine = folder / f"fake_{precision}.engine"
    description = json.loads(sidecar.engine_path.read_text())
    engine.write_text(json.dumps({**description, "latency_ms": latency_ms}))
    for kind in ("reference_onnx_file", "onnx_file"):  # the graphs beside the engine, as a build writes them
        name = getattr(sidecar.source, kind)
        (folder / name).write_bytes((sidecar.folder / name).read_bytes())
    timed = dataclasses.replace(sidecar.with_engine(engine), precision={"requested": precision, "built": precision})
    return write_sidecar(engine.with_suffix(".json"), timed)


def rounding_model(path):
    """y = (x * 1.0002 - x) * 1000 + 0.5: FP16 rounds the constant 1.0002 to 1.0, and y to 0.5.

    ONNX Runtime's CPU provider computes FP16 nodes in FP32 where it lacks FP16 kernels, so what
    shows there is FP16 weights and constants; this one breaks the output and no float-pass rule
    sees it (1.0002 is inside FP16's range), so the bisection must find the node that uses it.
    """
    consts = [numpy_helper.from_array(np.array(v, np.float32), n)
              for n, v in (("c", 1.0002), ("k", 1000.0), ("half", 0.5))]
    nodes = [helper.make_node("Mul", ["x", "c"], ["h1"], name="scale"),
             helper.make_node("Sub", ["h1", "x"], ["h2"], name="diff"),
             helper.make_node("Mul", ["h2", "k"], ["h3"], name="gain"),
             helper.make_node("Add", ["h3", "half"], ["y"], name="offset")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 8])], consts)
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    return path


def outlier_net(path):
    """conv1 → ×[1000, 1, …] per channel → conv2 → relu → conv3. conv2's input has one huge channel (its
    weights undo the gain), so its per-tensor INT8 scale wipes out the other seven channels: the one
    layer the INT8 bisection must keep."""
    rng = np.random.default_rng(0)
    weights = {f"w{i}": rng.normal(0, 0.3, (8, 4 if i == 1 else 8, 3, 3)).astype(np.float32) for i in (1, 2, 3)}
    weights["w2"][:, 0] /= 1000.0  # the outlier channel contributes as much as the others to conv2's output
    gain = np.ones((1, 8, 1, 1), np.float32)
    gain[0, 0] = 1000.0
    inits = [numpy_helper.from_array(v, k) for k, v in weights.items()] + [numpy_helper.from_array(gain, "gain")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Mul", ["c1", "gain"], ["g"], name="outlier"),
             helper.make_node("Conv", ["g", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c2"], ["r"], name="relu"),
             helper.make_node("Conv", ["r", "w3"], ["y"], name="conv3", pads=[1, 1, 1, 1])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 8, 8, 8])], inits)
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)]).SerializeToString())
    return path
