"""Direct path vs ONNX path, side by side in one run: capture time (torch.export + lowering vs ONNX
export + cleanup + parse), TensorRT network layers, build time and plan size, on the CPU with
TensorRT-RTX (builds only; no engine runs here).

    PYTHONPATH=$PWD python bench/direct_vs_onnx.py --json docs/bench/direct_vs_onnx.json
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "convert"))

from blocks import SwinBlock, ViTBlock  # noqa: E402

from trtforge.builder.build import RecordingLogger, parse_network  # noqa: E402
from trtforge.capture.export import export_onnx  # noqa: E402
from trtforge.convert.api import build_lowered, lower_module  # noqa: E402
from trtforge.core import trt  # noqa: E402
from trtforge.passes.cleanup import cleanup  # noqa: E402
from trtforge.passes.graph import load_ir, save_model  # noqa: E402

BATCH = (1, 2, 4)


def models():
    from trtforge.zoo import efficientnet_lite0, minilm_encoder

    ids = torch.randint(0, 30000, (2, 16))
    yield "efficientnet_lite0", efficientnet_lite0(), (torch.randn(2, 3, 224, 224),)
    yield "minilm_l6", minilm_encoder(), (ids, torch.ones_like(ids))
    torch.manual_seed(0)
    yield "vit_block", ViTBlock().eval(), (torch.randn(2, 3, 32, 32),)
    yield "swin_block", SwinBlock().eval(), (torch.randn(2, 8, 8, 32),)


def direct(model, inputs) -> dict:
    start = time.perf_counter()
    lowered = lower_module(model, inputs, batch=BATCH)
    capture = time.perf_counter() - start
    plan = build_lowered(lowered.net, BATCH, optimization_level=0)
    return {"capture_s": round(capture, 2), "layers": lowered.net.net.num_layers, "build_s": round(plan.seconds, 2),
            "plan_mb": round(len(plan.plan) / 2**20, 1)}


def onnx(model, inputs, folder: Path) -> dict:
    start = time.perf_counter()
    names = [f"input_{i}" for i in range(len(inputs))]
    raw = export_onnx(model, inputs, folder / "raw.onnx", input_names=names, output_names=["out"],
                      dynamic_batch=True)
    path = folder / "clean.onnx"
    save_model(cleanup(load_ir(raw)), path)
    logger = RecordingLogger()
    builder = trt.bindings().Builder(logger.trt_logger)
    network, _parser = parse_network(builder, path, logger)
    capture = time.perf_counter() - start
    cfg = builder.create_builder_config()
    cfg.builder_optimization_level = 0
    profile = builder.create_optimization_profile()
    for i in range(network.num_inputs):
        tensor = network.get_input(i)
        shape = tuple(tensor.shape)
        profile.set_shape(tensor.name, *[tuple(b if d == -1 else d for d in shape) for b in BATCH])
    cfg.add_optimization_profile(profile)
    start = time.perf_counter()
    plan = builder.build_serialized_network(network, cfg)
    return {"capture_s": round(capture, 2), "layers": network.num_layers,
            "build_s": round(time.perf_counter() - start, 2), "plan_mb": round(len(bytes(plan)) / 2**20, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = []
    for name, model, inputs in models():
        with tempfile.TemporaryDirectory() as tmp:
            row = {"model": name, "direct": direct(model, inputs)}
            try:
                row["onnx"] = onnx(model, inputs, Path(tmp))
            except Exception as exc:  # a model the ONNX path cannot take is a result here
                row["onnx"] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"}
        rows.append(row)
        print(json.dumps(row))
    result = {"machine": platform.processor() or platform.machine(), "trt": trt.info().version,
              "torch": torch.__version__, "date": time.strftime("%Y-%m-%d"), "batch": BATCH, "rows": rows}
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
