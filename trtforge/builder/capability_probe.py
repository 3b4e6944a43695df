"""Probe builds for the capability table: one small hand-made quantized graph per op class and scheme,
built for one target. What the builder refuses (TensorRT-RTX and FP8 on sm86: "Cannot compile for
target(s) sm86, because the model contains HW-specific datatypes: fp8_e4m3") is found by building it.

The graphs are FP16 with FP16 scales (opset 21), the patterns trtforge's quantizers write: W8A8 INT8
Q/DQ, a DQ-only blocked INT8/INT4 weight (``block_size`` 128), FP8 (FLOAT8E4M3FN) Q/DQ.

Example:
    >>> probe_refusal("gemm", "fp8", "sm86")
    'Cannot compile for target(s) sm86, because the model contains HW-specific datatypes: fp8_e4m3'
    >>> probe_refusal("gemm", "fp8", "sm89") is None
    True
"""

from __future__ import annotations

import functools
import re
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from trtforge.builder.build import BuildFailedError, OnnxParseError, build_engine
from trtforge.core.config import CompileConfig
from trtforge.core.precisions import RECORDS

#: Opset of the probe graphs (blocked DequantizeLinear and INT4 need 21).
PROBE_OPSET = 21
BLOCK_SIZE = 128


def _onnx_dtype(name: str | None) -> int | None:
    """A ``core.quant_plan.QUANT_DTYPES`` name (``"float8e4m3fn"``) → its ``TensorProto`` type; None stays None."""
    return None if name is None else getattr(TensorProto, name.upper())


#: Scheme → (activation dtype or None, weight dtype), from each quantized precision's record; weight-only schemes
#: quantize the weight alone.
PATTERNS: dict[str, tuple[int | None, int]] = {
    p.scheme: (_onnx_dtype(p.activation_dtype), _onnx_dtype(p.weight_dtype)) for p in RECORDS if p.scheme
}
#: The schemes a probe graph exists for (FP4 needs opset 23 and Blackwell; the table alone speaks for it).
PROBED: tuple[str, ...] = tuple(PATTERNS)
REASON_CHARS = 200


def _weight(op_class: str, dtype: int, blocked: bool) -> tuple[list[TensorProto], list[onnx.NodeProto], str]:
    """The quantized weight initializers and their DequantizeLinear (per output channel, or blocked)."""
    rng = np.random.default_rng(0)
    shape = (32, 128, 3, 3) if op_class == "conv" else (128, 64)
    values = rng.integers(-7, 8, size=shape)
    stored = helper.make_tensor("w_q", dtype, shape, values.flatten().tolist())
    if blocked:  # along the reduction axis: input channels (Conv, axis 1) or K (MatMul, axis 0)
        axis = 1 if op_class == "conv" else 0
        scale_shape = list(shape)
        scale_shape[axis] //= BLOCK_SIZE
        attrs = {"axis": axis, "block_size": BLOCK_SIZE}
    else:
        axis = 0 if op_class == "conv" else 1
        scale_shape, attrs = [shape[axis]], {"axis": axis}
    scale = numpy_helper.from_array(np.full(scale_shape, 0.01, np.float16), "w_scale")
    inputs = ["w_q", "w_scale"]
    inits = [stored, scale]
    if dtype == TensorProto.FLOAT8E4M3FN:
        inits.append(helper.make_tensor("w_zero", dtype, scale_shape, [0] * int(np.prod(scale_shape))))
        inputs.append("w_zero")
    return inits, [helper.make_node("DequantizeLinear", inputs, ["w"], **attrs)], "w"


def probe_graph(op_class: str, scheme: str) -> onnx.ModelProto:
    """One Conv (``conv``) or MatMul (``gemm``) in FP16, quantized as ``scheme``.

    Example:
        >>> [n.op_type for n in probe_graph("gemm", "fp8").graph.node]
        ['QuantizeLinear', 'DequantizeLinear', 'DequantizeLinear', 'MatMul']
    """
    activation, weight = PATTERNS[scheme]
    x_shape = [1, 128, 16, 16] if op_class == "conv" else [1, 16, 128]
    # TensorRT blocks only the last two dims: a convolution's weight-only scales are per output channel.
    inits, nodes, w = _weight(op_class, weight, blocked=activation is None and op_class == "gemm")
    x = "x"
    if activation is not None:
        inits += [numpy_helper.from_array(np.array(0.05, np.float16), "x_scale"),
                  helper.make_tensor("x_zero", activation, [], [0])]
        nodes = [helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zero"], ["x_q"]),
                 helper.make_node("DequantizeLinear", ["x_q", "x_scale", "x_zero"], ["x_dq"]), *nodes]
        x = "x_dq"
    if op_class == "conv":
        nodes.append(helper.make_node("Conv", [x, w], ["y"], pads=[1, 1, 1, 1]))
        y_shape = [1, 32, 16, 16]
    else:
        nodes.append(helper.make_node("MatMul", [x, w], ["y"]))
        y_shape = [1, 16, 64]
    graph = helper.make_graph(nodes, f"probe_{op_class}_{scheme}",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT16, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT16, y_shape)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", PROBE_OPSET)], ir_version=10)


@functools.cache  # one installed TensorRT per process: its answer holds until the process ends
def probe_refusal(op_class: str, scheme: str, target: str) -> str | None:
    """Build the probe graph for ``target``: None when it builds, else the builder's one-line reason.
    A scheme or class without a probe graph: None (the table alone decides)."""
    if scheme not in PATTERNS or op_class not in ("conv", "gemm"):
        return None
    with tempfile.TemporaryDirectory(prefix="trtforge-capability-") as tmp:
        path = Path(tmp) / "probe.onnx"
        path.write_bytes(probe_graph(op_class, scheme).SerializeToString())
        config = CompileConfig(precision="fp16", targets=(target,), optimization_level=0)
        try:
            build_engine(path, config, name="capability_probe", progress=False, source="probe")
        except OnnxParseError as exc:
            return _short(exc.failures[0][2])
        except BuildFailedError as exc:
            return _short(str(exc).split(": ", 1)[-1])
    return None


def _short(reason: str) -> str:
    """The message itself: without TensorRT's ``Error Code N: Myelin ([file:line: pass]`` frame and source place."""
    reason = " ".join(reason.split())
    framed = re.search(r"\] (.+?)(?: In \w+ at |\)?$)", reason)
    reason = framed.group(1).rstrip(" .)") if framed else reason
    return reason if len(reason) <= REASON_CHARS else reason[: REASON_CHARS - 1].rstrip() + "…"
