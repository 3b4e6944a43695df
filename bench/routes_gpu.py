"""Route benchmark on one GPU: correctness, latency, end-to-end vs model-only, preprocessing, memory.

One script for one lease (see docs/benchmarks.md for the results and the command):

    PYTHONPATH=. python bench/routes_gpu.py --out "$OUT"            # on the GPU machine
    PYTHONPATH=. python bench/routes_gpu.py --quick --out /tmp/rg   # a dry run on the CPU

Models: EfficientNet-Lite0 (real weights) and a DETR-style detector (ResNet-18-like backbone,
6-layer transformer decoder, 300 queries, random weights). Routes: eager FP32, FP16, CUDA graph
FP16, compiled (torch.compile max-autotune, FP16). Batch 1 and 8. The predictor runs end to end
from a 1280×720 uint8 frame in host memory to results in host memory.

Writes routes_gpu.json (every number), routes_gpu.png (the plot), and prints the tables.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from rich.console import Console
from rich.table import Table

import trtforge
from trtforge.measure.routes import (
    BenchResult,
    bench_preprocessing,
    example_input,
    run_route_bench,
    start_bench_script,
    write_zoo_sidecar,
    zoo_bench_model,
)
from trtforge.measure.timing import measure_interleaved, settle_compile_workers
from trtforge.vision import Predictor
from trtforge.zoo.efficientnet_lite import LITE0_PREPROCESSING

console = Console(width=180)

#: The targets of issue 4, as data: (summary key, limit, direction).
TARGETS = (
    ("end_to_end_over_model[cuda_graph, batch 1]", 1.15, "<="),
    ("preprocess_speedup_gpu_over_pil", 5.0, ">="),
)


def frame_1280x720() -> np.ndarray:
    """A real photo (skimage astronaut) resized to 1280×720: the frame every end-to-end run uses."""
    from PIL import Image
    from skimage import data

    return np.ascontiguousarray(np.asarray(Image.fromarray(data.astronaut()).resize((1280, 720), Image.BILINEAR)))


def check_predictor_graph(image: np.ndarray, device: torch.device, result: BenchResult) -> None:
    """The one-graph predictor (pre+model+post) gives what the plain path gives on the same route."""
    for name in ("efficientnet_lite0", "detr_like"):
        model = zoo_bench_model(name)
        with model.open("cuda_graph", device) as engine:
            graph = Predictor(engine, model.preprocessing, task=model.task, cuda_graph=engine.device.type == "cuda")
            plain = Predictor(engine, model.preprocessing, task=model.task, cuda_graph=False)
            frames = [image, image[::-1].copy()]
            a, b = graph(frames), plain(frames)
            if model.task == "classification":
                ok = all(np.array_equal(x.class_id, y.class_id) for x, y in zip(a, b, strict=True))
                err = max(float(np.abs(x.score - y.score).max()) for x, y in zip(a, b, strict=True))
            else:
                graph.threshold = plain.threshold = 0.0  # compare the full top-k, not what passes a threshold
                a, b = graph(frames), plain(frames)
                err = max(float(np.abs(x.confidence - y.confidence).max()) for x, y in zip(a, b, strict=True))
                ok = err < 1e-2
            result.checks.append({"model": name, "route": "predictor_graph_vs_plain", "batch": 2, "rel_error": err,
                                  "top1_agreement": None, "ok": bool(ok)})
            graph.close()
            plain.close()


def memory_roundtrips(loops: int, device: torch.device, image: np.ndarray) -> dict:
    """Load a route through trtforge.load, run it and its predictor, close it; ``loops`` times.

    Allocated GPU memory must come back to its baseline (taken after one warm round, which sets up
    cuDNN/cuBLAS workspaces that live for the process).
    """
    if device.type != "cuda":
        return {"skipped": "no GPU"}
    with tempfile.TemporaryDirectory() as folder:
        path = write_zoo_sidecar(Path(folder), "efficientnet_lite0")
        x = torch.rand(4, 3, 224, 224, device=device)

        def roundtrip() -> None:
            engine = trtforge.load(path, route="cuda_graph", device=device)
            engine(x)
            with Predictor(engine, task="classification") as predictor:
                predictor(image)
            engine.close()
            del engine
            gc.collect()
            torch.cuda.synchronize(device)

        roundtrip()
        baseline = torch.cuda.memory_allocated(device)
        samples = []
        t0 = time.perf_counter()
        for _ in range(loops):
            roundtrip()
            samples.append(torch.cuda.memory_allocated(device))
        return {"loops": loops, "route": "cuda_graph", "samples": samples, "baseline_bytes": baseline, "final_bytes": samples[-1],
                "max_bytes": max(samples), "min_bytes": min(samples), "seconds": time.perf_counter() - t0,
                "ok": samples[-1] == baseline, "max_reserved_bytes": torch.cuda.max_memory_reserved(device)}


def breakdown(image: np.ndarray, device: torch.device, warmup: int, repeats: int) -> BenchResult:
    """Where the end-to-end time goes on the cuda_graph route, batch 1, frame in the pinned buffer.

    upload: pinned frame → the graph's static uint8 input (one DMA); graph: replay of the one graph
    (preprocess + model + top-k/decoding) on a resident frame; full: the predictor call (upload,
    replay, results to the host, Python); model: the engine alone on a resident 224²/640² input.
    Reads the predictor's private buffers: a diagnostic, not an API.
    """
    result = BenchResult()
    if device.type != "cuda":
        result.config["skipped"] = "no GPU: the predictor has no graph to break down"
        return result
    for name in ("efficientnet_lite0", "detr_like"):
        _breakdown_one(name, image, device, warmup, repeats, result)
    return result


def _breakdown_one(name: str, image: np.ndarray, device: torch.device, warmup: int, repeats: int,
                   result: BenchResult) -> None:
    model = zoo_bench_model(name)
    with model.open("cuda_graph", device) as engine, \
            Predictor(engine, model.preprocessing, task=model.task, compile_preprocessing=False) as predictor:
        frames = predictor.frame_buffer(1, *image.shape[:2])
        frames[...] = image
        frame = frames[0]
        one_graph = predictor(frame)  # captures the graph (frame-buffer path: DMA in, results out included)
        plain = predictor(np.array(frame))  # a pageable copy: staged into our pinned buffer, then its own graph
        agree = all(np.array_equal(getattr(one_graph, f), getattr(plain, f))
                    for f in ("class_id", "score", "xyxy", "confidence") if hasattr(one_graph, f))
        result.checks.append({"model": name, "route": "frame_buffer_graph_vs_upload_path", "batch": 1,
                              "rel_error": 0.0 if agree else float("nan"), "identical": agree})
        if not agree:
            raise AssertionError(f"{name}: the one-graph frame-buffer path disagrees with the upload path")
        shape = (1, *image.shape)
        static, _sizes = predictor._static[shape]
        staging = predictor.pre.staging(shape)
        key = predictor._frame_buffer_key([frame])
        graphs = predictor._graphs
        x = example_input(model.inputs[0], 1, engine.device)
        # The same call with compile_preprocessing=True (one fused Inductor kernel for the resize).
        fused = Predictor(engine, model.preprocessing, task=model.task, compile_preprocessing=True)
        fused_frames = fused.frame_buffer(1, *image.shape[:2])
        fused_frames[...] = image
        fused_frame = fused_frames[0]
        predictor.threshold = fused.threshold = 0.0
        a, b = predictor(frame), fused(fused_frame)
        predictor.threshold = fused.threshold = 0.5
        result.config["compile_pool"] = settle_compile_workers()  # timings past any compile-pool start-up
        scores = "score" if model.task == "classification" else "confidence"
        err = float(np.abs(getattr(a, scores)[:5] - getattr(b, scores)[:5]).max())
        ok = bool(np.array_equal(a.class_id[:1], b.class_id[:1]) and err < 1e-2)
        result.checks.append({"model": name, "route": "compiled_preprocessing_vs_eager", "batch": 1,
                              "rel_error": err, "ok": ok})
        cases = {
            "upload": lambda: static.copy_(staging, non_blocking=True),  # the frame's DMA alone
            "graph": lambda: graphs.replay(key, None),  # DMA in, pre, model, decode, packed copy out
            "full": lambda: predictor(frame),
            "full_fused_pre": lambda: fused(fused_frame),
            "model": lambda: engine(x),
        }
        stats = measure_interleaved(cases, device, warmup=warmup, repeats=repeats)
        fused.close()
        for kind, st in stats.items():
            result.add(name, "cuda_graph", 1, f"breakdown_{kind}", st, interleaved=True)


def merge(result: BenchResult, previous: dict, source: str) -> None:
    """Keep an earlier run's rows and checks for the cases this run did not measure (tagged with their file)."""
    have = {(r["model"], r["route"], r["batch"], r["kind"]) for r in result.rows}
    for row in previous["rows"]:
        if (row["model"], row["route"], row["batch"], row["kind"]) not in have:
            result.rows.append({**row, "from": row.get("from", source)})
    have_checks = {(c["model"], c["route"], c["batch"]) for c in result.checks}
    for check in previous["checks"]:
        if (check["model"], check["route"], check["batch"]) not in have_checks:
            result.checks.append({**check, "from": check.get("from", source)})
    result.config["merged_from"] = {"file": source, "machine": previous.get("machine")}


def targets(result: BenchResult, memory: dict) -> list[dict]:
    summary = result.summary()
    rows = []
    for ratio in summary["end_to_end_over_model"]:
        if ratio["route"] == "cuda_graph" and ratio["batch"] == 1:
            value = ratio["end_to_end_over_model"]
            rows.append({"target": f"e2e/model, cuda_graph b1, {ratio['model']}", "value": value, "limit": "<= 1.15",
                         "ok": value <= 1.15})
    for ratio in summary["end_to_end_pinned_over_model"]:
        if ratio["route"] == "cuda_graph" and ratio["batch"] == 1:
            value = ratio["end_to_end_pinned_over_model"]
            rows.append({"target": f"e2e (frame in pinned buffer)/model, cuda_graph b1, {ratio['model']}",
                         "value": value, "limit": "<= 1.15", "ok": value <= 1.15})
    for ratio in summary["end_to_end_device_over_model"]:
        if ratio["route"] == "cuda_graph" and ratio["batch"] == 1:
            value = ratio["end_to_end_device_over_model"]
            rows.append({"target": f"e2e (frame already on the GPU)/model, cuda_graph b1, {ratio['model']}",
                         "value": value, "limit": "<= 1.15", "ok": value <= 1.15})
    pre = summary["preprocess_ms"]
    pil, gpu = pre.get("frame_1280x720:preprocess_pil_numpy"), pre.get("frame_1280x720:preprocess_gpu_from_host")
    if pil and gpu:
        rows.append({"target": "preprocess PIL/NumPy over GPU (from host numpy)", "value": pil / gpu, "limit": ">= 5",
                     "ok": pil / gpu >= 5})
    for speed in summary["speedup_over_eager"]:
        if speed["route"] == "cuda_graph":
            rows.append({"target": f"cuda_graph FP16 over eager FP32, {speed['model']} b{speed['batch']}",
                         "value": speed["speedup_over_eager_fp32"], "limit": "report", "ok": True})
    if "ok" in memory:
        rows.append({"target": f"memory back to baseline after {memory['loops']} load/close", "value":
                     memory["final_bytes"] - memory["baseline_bytes"], "limit": "== 0 bytes", "ok": memory["ok"]})
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--routes", nargs="+", default=["eager", "fp16", "cuda_graph", "compiled"])
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 8])
    parser.add_argument("--models", nargs="+", default=["efficientnet_lite0", "detr_like"])
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--memory-loops", type=int, default=100)
    parser.add_argument("--quick", action="store_true", help="tiny repeats (a dry run on the CPU)")
    parser.add_argument("--compile-mode", default="max-autotune",
                        help="torch.compile mode of the compiled route (rows are labelled with it unless max-autotune)")
    fused = parser.add_mutually_exclusive_group()
    fused.add_argument("--compile-preprocessing", action="store_const", const=True, default=None,
                       help="the cuda_graph route's predictor fuses its preprocessing (Predictor(compile_preprocessing=True); "
                            "the default on a GPU with Triton)")
    fused.add_argument("--no-compile-preprocessing", dest="compile_preprocessing", action="store_const", const=False,
                       help="the cuda_graph route's predictor keeps its preprocessing unfused")
    parser.add_argument("--merge", type=Path, help="an earlier routes_gpu.json: its rows for cases not re-run are kept")
    parser.add_argument("--only-breakdown", action="store_true",
                        help="only the end-to-end breakdown (cuda_graph, batch 1) → routes_gpu_breakdown.json")
    args = parser.parse_args()
    if args.quick:
        args.warmup, args.repeats, args.memory_loops = 1, 3, 2
    device, result = start_bench_script(args.out, sys.argv)
    console.print(result.machine)
    image = frame_1280x720()

    def save(res: BenchResult) -> None:
        res.save_json(args.out / "routes_gpu.json")

    def print_breakdown(parts: BenchResult) -> None:
        table = Table(title="end to end, cuda_graph, batch 1, frame in pinned buffer: where the time goes")
        for column in ("model", "part", "p50 ms", "p90 ms", "p99 ms"):
            table.add_column(column)
        for row in parts.rows:
            if row["kind"].startswith("breakdown_"):
                table.add_row(row["model"], row["kind"].removeprefix("breakdown_"), f"{row['median_ms']:.3f}",
                              f"{row['p90_ms']:.3f}", f"{row['p99_ms']:.3f}")
        console.print(table)

    if args.only_breakdown:
        parts = breakdown(image, device, args.warmup, args.repeats)
        parts.config["command"] = result.config["command"]
        parts.save_json(args.out / "routes_gpu_breakdown.json")
        print_breakdown(parts)
        return 0

    console.rule("preprocessing, 1280×720 → 224×224")
    bench_preprocessing(image, LITE0_PREPROCESSING, device=device, warmup=args.warmup, repeats=args.repeats,
                        model="frame_1280x720", result=result)
    save(result)
    console.rule("predictor: one graph vs plain path")
    check_predictor_graph(image, device, result)
    plain_routes = [r for r in args.routes if r != "compiled"]
    models = [zoo_bench_model(m, compile_mode=args.compile_mode) for m in args.models]
    console.rule(f"routes {plain_routes}")
    run_route_bench(models, plain_routes, args.batches, device=device, image=image, warmup=args.warmup,
                    repeats=args.repeats, result=result, on_progress=console.log, on_row=save,
                    compile_preprocessing=args.compile_preprocessing)
    console.rule(f"memory: {args.memory_loops} × load / run / close")
    memory = memory_roundtrips(args.memory_loops, device, image)
    result.config["memory"] = {k: v for k, v in memory.items() if k != "samples"}
    result.config["memory_samples_bytes"] = memory.get("samples")
    console.print(memory)
    save(result)
    if "compiled" in args.routes:  # last: max-autotune compiles for minutes; partial results are saved
        console.rule("compiled (torch.compile max-autotune)")
        label = "compiled" if args.compile_mode == "max-autotune" else f"compiled({args.compile_mode})"
        run_route_bench(models, ["compiled"], args.batches, device=device, image=image, warmup=args.warmup,
                        repeats=args.repeats, result=result, on_progress=console.log, on_row=save,
                        route_labels={"compiled": label})
    console.rule("end-to-end breakdown")
    result.rows.extend(breakdown(image, device, args.warmup, args.repeats).rows)
    save(result)
    if args.merge is not None:
        merge(result, json.loads(args.merge.read_text()), args.merge.name)
    result.config["targets"] = targets(result, memory)
    save(result)
    console.print(result.table())
    checks = Table(title="checks against eager FP32 (first call)")
    for column in ("model", "route", "batch", "rel_error", "top1", "first call s", "ok"):
        checks.add_column(column)
    for c in result.checks:
        checks.add_row(c["model"], c["route"], str(c["batch"]), f"{c['rel_error']:.2e}", str(c.get("top1_agreement")),
                       f"{c.get('first_call_s', 0):.2f}", "ok" if c["ok"] else "FAIL")
    console.print(checks)
    goals = Table(title="issue 4 targets")
    for column in ("target", "value", "limit", "ok"):
        goals.add_column(column)
    for t in result.config["targets"]:
        goals.add_row(t["target"], f"{t['value']:.3f}", t["limit"], "yes" if t["ok"] else "NO")
    console.print(goals)
    print_breakdown(result)
    try:
        result.save_plot(args.out / "routes_gpu.png")
    except ImportError as exc:
        console.print(f"[yellow]no plot:[/] {exc}")
    console.print(json.dumps(result.summary(), indent=1)[:3000])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
