"""EfficientNet-Lite0: precision bisection and layer-wise divergence against the quantizer's sensitivity ranking.

Issue 11's acceptance: INT8 bisection reaches top-1 agreement ≥ 0.95 on held-out crops with fewer
layers kept in FP16 than "every depthwise conv", or says it cannot; layer-wise divergence of the
FP16 and INT8 graphs names a plausible first layer, compared with the sensitivity ranking.

Data (offline): calibration = skimage photo crops (seed 0), search crops (seed 1), held-out crops
(seed 2), all through Lite0's preprocessing. Everything runs in ONNX Runtime on the CPU; INT8 with
FP32 scales.

Usage:
    PYTHONPATH=. python bench/repro/precision_bisection.py --json docs/bench/precision_bisection_lite0.json
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path

import torch

from trtforge.capture.export import export_onnx
from trtforge.core.budget import ErrorBudget
from trtforge.core.config import QuantConfig
from trtforge.core.specs import TensorSpec
from trtforge.debug.bisect import Int8Search, bisect_int8
from trtforge.debug.layerwise import layerwise
from trtforge.measure.inputs import make_inputs, split_batches
from trtforge.passes.cleanup import cleanup
from trtforge.passes.graph import QDQ_OPSET, ensure_node_names, ensure_opset, load_ir, save_model
from trtforge.passes.process import process
from trtforge.quantize.report import run_model
from trtforge.quantize.sensitivity import rank_groups
from trtforge.zoo import efficientnet_lite0
from trtforge.zoo.efficientnet_lite import LITE0_PREPROCESSING

SPEC = (TensorSpec("images", "float32", (-1, 3, 224, 224)),)


def crops(count: int, seed: int) -> dict:
    return make_inputs(SPEC, (), count, LITE0_PREPROCESSING, seed=seed)


def top1(search: Int8Search, kept: frozenset[str], batches, reference) -> float:
    return ErrorBudget.of(top1_agreement=0.95).measure(reference, search.outputs(kept, batches))["top1_agreement"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calib", type=int, default=64)
    parser.add_argument("--search", type=int, default=128)
    parser.add_argument("--held-out", type=int, default=256)
    parser.add_argument("--skip-bisection", action="store_true", help="only the depthwise baseline and layer-wise")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    started = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        raw = export_onnx(efficientnet_lite0(), (torch.zeros(1, 3, 224, 224),), Path(tmp) / "raw.onnx",
                          input_names=["images"], output_names=["logits"])
        fp32_path = Path(tmp) / "lite0.onnx"
        save_model(cleanup(load_ir(raw)), fp32_path)
        model = ensure_node_names(ensure_opset(load_ir(fp32_path), QDQ_OPSET))
        calib = crops(args.calib, 0)
        search, held = split_batches(crops(args.search, 1), 8), split_batches(crops(args.held_out, 2), 8)
        result = None if args.skip_bisection else bisect_int8(model, search, held, "top1_agreement", 0.95, calib)
        engine = Int8Search(model, calib, QuantConfig(bias_correction=False), None)
        depthwise = frozenset(c.label for c in engine.analysis.candidates if c.groups > 1)
        held_ref = run_model(model, held)
        depthwise_top1 = top1(engine, depthwise, held, held_ref)
        rows = rank_groups(model, engine.full, engine.analysis, engine.data.held_batches)
        ranking = [engine.labels[o] for o in dict.fromkeys(o for row in rows for o in row["layers"])]
        int8_path = Path(tmp) / "lite0_int8.onnx"
        save_model(process(model, "int8", engine.full).model, int8_path)
        lw_int8 = layerwise(fp32_path, int8_path, crops(8, 3))
        lw_fp16 = layerwise(fp32_path, process(load_ir(fp32_path), "fp16").model, crops(8, 3))
    first = lw_int8.first
    record = {
        "command": "PYTHONPATH=. python bench/repro/precision_bisection.py " + " ".join(
            f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if k != "json"),
        "machine": f"{platform.node()} {platform.machine()}, Python {platform.python_version()}",
        "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "seconds": round(time.time() - started),
        "bisection": None if result is None else dict(result.__dict__),
        "depthwise_kept": {"layers": len(depthwise), "held_out_top1": depthwise_top1},
        "layerwise_int8": {"first": first.label if first else None, "rel_l2": first.rel_l2 if first else None,
                           "threshold": lw_int8.threshold, "worst_rel_l2": max(row.rel_l2 for row in lw_int8.layers),
                           "most_added": [[row.label, row.added] for row in lw_int8.most_added(5)],
                           "sensitivity_rank_of_first": ranking.index(first.label) + 1 if first else None,
                           "sensitivity_top5": ranking[:5]},
        "layerwise_fp16": {"first": lw_fp16.first.label if lw_fp16.first else None,
                           "most_added": [[row.label, row.added] for row in lw_fp16.most_added(3)],
                           "worst_rel_l2": max(row.rel_l2 for row in lw_fp16.layers), "threshold": lw_fp16.threshold},
    }
    text = json.dumps(record, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
