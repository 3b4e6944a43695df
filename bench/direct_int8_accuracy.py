"""EfficientNet-Lite0 INT8: the direct path (forward-hook calibration, Q/DQ layers in the TensorRT network,
run through the reference evaluator) against the ONNX path (the quantizer's simulated Q/DQ graph in
ONNX Runtime), side by side in one run, each compared with FP32 PyTorch on the same photo crops.

Data as in bench/quant_accuracy.py: evaluation crops of skimage photos (seed 11), calibration crops
(seed 12, 128, the first 80 % calibrate on both paths, the rest is held back). Both paths use the default
placement rules and the mse calibrator, without and with bias correction (kept only when it helps on the
held-back crops); both compute the one ``QuantPlan``.

    PYTHONPATH=$PWD python bench/direct_int8_accuracy.py --n-eval 500 --json docs/bench/direct_int8_accuracy.json
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import torch

from trtforge.capture.export import export_onnx
from trtforge.convert.api import lower_module
from trtforge.convert.evaluator import evaluate
from trtforge.core.config import QuantConfig
from trtforge.passes.cleanup import cleanup
from trtforge.passes.graph import load_ir, ort_session, save_model
from trtforge.quantize.module_quantizer import quantize_module
from trtforge.quantize.quantizer import quantize_model
from trtforge.quantize.report import classification_metrics
from trtforge.zoo import efficientnet_lite0
from trtforge.zoo.photos import normalize, photo_crops

BATCH = 32


def _metrics(ref: np.ndarray, test: np.ndarray) -> dict[str, float]:
    m = classification_metrics(ref, test)
    return {"top1": m["top1_agreement"], "top5_overlap": m["top5_overlap"], "softmax_kl": m["softmax_kl"]}


CONFIGS = (("mse, no bias corr.", QuantConfig(calibrator="mse", bias_correction=False)),
           ("default (mse, bias corr.)", QuantConfig()))
#: The direct path's lowerings run per configuration (the FP16 evaluator takes ~6 min for 500 crops).
DIRECT_PRECISIONS = (("fp16", "fp32"), ("fp32",))


def direct_rows(model, ev: np.ndarray, calib: list[dict], ref: np.ndarray) -> list[dict]:
    rows = []
    for (name, cfg), precisions in zip(CONFIGS, DIRECT_PRECISIONS, strict=True):
        t = time.perf_counter()
        result = quantize_module(model, ["x"], calib, cfg)
        calib_s = time.perf_counter() - t
        for precision in precisions:
            lowered = lower_module(result.model, (torch.zeros(2, 3, 224, 224),), batch=(1, 16, BATCH),
                                   precision=precision, int8=result.plan)
            t = time.perf_counter()
            out = np.concatenate([evaluate(lowered.net.record, {"x": torch.from_numpy(ev[i:i + BATCH])})[0].numpy()
                                  for i in range(0, len(ev), BATCH)])
            rows.append({"path": "direct", "config": f"{name}, rest {precision.upper()} (evaluator)",
                         "int8_layers": len(lowered.int8_layers),
                         "layers": len(result.plan.layers) + len(result.plan.excluded),
                         "bias_correction": result.report["bias_correction"],
                         "calibrate_s": round(calib_s, 1), "evaluate_s": round(time.perf_counter() - t, 1),
                         **_metrics(ref, out)})
            print(rows[-1], flush=True)
    return rows


def onnx_rows(model, work: Path, ev: np.ndarray, calib: list[dict], ref: np.ndarray) -> list[dict]:
    raw = export_onnx(model, (torch.zeros(1, 3, 224, 224),), work / "raw.onnx", input_names=["x"],
                      output_names=["logits"])
    save_model(cleanup(load_ir(raw)), work / "lite0.onnx")
    fp32 = onnx.load(str(work / "lite0.onnx"))
    rows = []
    for name, cfg in CONFIGS:
        t = time.perf_counter()
        result = quantize_model(fp32, calib, cfg, model.preprocessing, progress=False)
        sess = ort_session(result.sim_model, providers=["CPUExecutionProvider"])
        out = np.concatenate([sess.run(None, {"x": ev[i:i + BATCH]})[0] for i in range(0, len(ev), BATCH)])
        rows.append({"path": "onnx", "config": f"{name} (simulated Q/DQ graph, ONNX Runtime)",
                     "int8_layers": len(result.plan.layers), "layers": len(result.plan.layers) + len(result.plan.excluded),
                     "calibrate_s": round(time.perf_counter() - t, 1), **_metrics(ref, out)})
        print(rows[-1], flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-eval", type=int, default=500)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    model = efficientnet_lite0().eval()
    pp = model.preprocessing
    ev = normalize(photo_crops(args.n_eval, seed=11), pp)
    cal = normalize(photo_crops(128, seed=12), pp)
    with torch.no_grad():
        ref = np.concatenate([model(torch.from_numpy(ev[i:i + BATCH])).numpy() for i in range(0, len(ev), BATCH)])
    rows = direct_rows(model, ev, [{"x": cal[i:i + 1]} for i in range(128)], ref)
    with tempfile.TemporaryDirectory() as tmp:
        rows += onnx_rows(model, Path(tmp), ev, [{"x": cal[i:i + 1]} for i in range(128)], ref)
    result = {"machine": platform.platform(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "n_eval": args.n_eval, "rows": rows}
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
