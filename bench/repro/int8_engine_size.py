"""Why an INT8 EfficientNet-Lite0 engine is bigger than its FP16 engine (TensorRT-RTX, on the CPU).

Builds Lite0 in FP16 and INT8 with ``trtforge.compile``, then rebuilds the INT8 Q/DQ graph with
the weight DequantizeLinear of some layers folded into FP16 constants (activations keep their
Q/DQ), to see which layers' INT8 weights cost engine bytes. Prints one table.

    python bench/repro/int8_engine_size.py            # about 1 minute on 2 cores

Results: docs/quantization.md ("Engine size").
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import torch
from onnx import numpy_helper
from rich.console import Console
from rich.table import Table

import trtforge
from trtforge.builder.build import build_engine
from trtforge.core.config import CompileConfig, QuantConfig
from trtforge.zoo import efficientnet_lite0
from trtforge.zoo.photos import normalize, photo_crops


def _is_depthwise(node: onnx.NodeProto) -> bool:
    return node.op_type == "Conv" and any(a.name == "group" and a.i > 1 for a in node.attribute)


def fold_weight_dequantize(model: onnx.ModelProto, consumer: Callable[[onnx.NodeProto], bool]) -> onnx.ModelProto:
    """A copy where each constant DequantizeLinear feeding a node that ``consumer`` accepts is a constant."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    inits = {i.name: i for i in out.graph.initializer}
    users: dict[str, list[onnx.NodeProto]] = {}
    for node in out.graph.node:
        for name in node.input:
            users.setdefault(name, []).append(node)
    kept = []
    for node in out.graph.node:
        if node.op_type == "DequantizeLinear" and node.input[0] in inits and any(map(consumer, users.get(node.output[0], []))):
            q = numpy_helper.to_array(inits[node.input[0]]).astype(np.float32)
            scale = numpy_helper.to_array(inits[node.input[1]])
            axis = next((a.i for a in node.attribute if a.name == "axis"), 1)
            shape = [1] * q.ndim
            shape[axis] = -1
            weight = q * (scale.astype(np.float32).reshape(shape) if scale.ndim else float(scale))
            out.graph.initializer.append(numpy_helper.from_array(weight.astype(scale.dtype), node.output[0]))
            continue
        kept.append(node)
    del out.graph.node[:]
    out.graph.node.extend(kept)
    return out


def main() -> int:
    console = Console(width=150)
    model = efficientnet_lite0()
    x = torch.zeros(1, 3, 224, 224)
    calibration = [{"images": a[None]} for a in normalize(photo_crops(128, seed=1), model.preprocessing)]
    table = Table(title="EfficientNet-Lite0 engine size, TensorRT-RTX, portable (MB); INT8 report on held-back crops")
    for column in ("graph", "ONNX", "engine", "INT8 MACs", "top-1 agreement", "softmax KL"):
        table.add_column(column)

    def report(art) -> tuple[str, str, str]:
        q = art.sidecar.quantization
        measured = (q.measured if q else None) or {}
        cover = (q.coverage if q else None) or {}
        share = cover.get("int8_mac_share", cover.get("share")) if isinstance(cover, dict) else cover
        return (f"{share:.1%}" if isinstance(share, float) else "–",
                f"{measured['top1_agreement']:.3f}" if "top1_agreement" in measured else "–",
                f"{measured['softmax_kl']:.4f}" if "softmax_kl" in measured else "–")
    with tempfile.TemporaryDirectory() as folder:
        arts = {}
        for precision in ("fp16", "int8"):
            # TensorRT-RTX runs no W8A8 INT8 (trtforge/builder/capability.py): this script measures what such a
            # build costs, so it asks for it explicitly.
            extra = {"calibration_data": calibration, "allow_unaccelerated": True} if precision == "int8" else {}
            arts[precision] = trtforge.compile(model, (x,), precision=precision, output_dir=Path(folder) / precision,
                                               input_names=["images"], progress=False, cache=False, **extra)
            table.add_row(precision, f"{arts[precision].onnx_path.stat().st_size / 1e6:.2f}",
                          f"{arts[precision].engine_path.stat().st_size / 1e6:.2f}",
                          *(report(arts[precision]) if precision == "int8" else ("–", "–", "–")))
        knob = trtforge.compile(model, (x,), precision="int8", output_dir=Path(folder) / "int8_dw",
                                input_names=["images"], progress=False, cache=False, calibration_data=calibration,
                                quant=QuantConfig(exclude=("DepthwiseConv",)), allow_unaccelerated=True)
        table.add_row('int8, QuantConfig(exclude=("DepthwiseConv",))', f"{knob.onnx_path.stat().st_size / 1e6:.2f}",
                      f"{knob.engine_path.stat().st_size / 1e6:.2f}", *report(knob))
        qdq = onnx.load(str(arts["int8"].onnx_path))
        variants = {
            "int8, depthwise weights as FP16 constants": lambda n: _is_depthwise(n),
            "int8, pointwise/dense weights as FP16 constants": lambda n: n.op_type in ("Conv", "Gemm") and not _is_depthwise(n),
        }
        for index, (label, consumer) in enumerate(variants.items()):
            path = Path(folder) / f"variant{index}.onnx"
            onnx.save(fold_weight_dequantize(qdq, consumer), path)
            plan = build_engine(path, CompileConfig(precision="int8"), name="lite0_variant", progress=False).plan
            table.add_row(label, f"{path.stat().st_size / 1e6:.2f}", f"{len(plan) / 1e6:.2f}", "–", "–", "–")
    console.print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
