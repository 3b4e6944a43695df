"""Where one predictor call spends its time (cuda_graph route, batch 1, frame in the pinned buffer).

Two views, for each zoo model:
- host phases, timed with ``perf_counter`` while the GPU is idle (medians of many calls): the
  frame-buffer check, the graph launch, an idle synchronize, unpacking, building the results;
- the GPU timeline of a few calls under ``torch.profiler``: every kernel and copy of the one graph
  against the model-only call, summed per call.

    PYTHONPATH=. python bench/predictor_profile.py --out "$OUT"        # on the GPU machine

Writes predictor_profile.json and prints the tables. A diagnostic for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from rich.console import Console
from rich.table import Table

from trtforge.measure.routes import example_input, machine_info, zoo_bench_model
from trtforge.vision import Predictor

console = Console(width=160)


def host_ms(fn: Callable[[], object], repeats: int, sync: Callable[[], None]) -> float:
    """Median host time of ``fn`` (the GPU drained before each call, not timed)."""
    samples = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1000.0)
    sync()
    return float(np.median(samples))


def gpu_profile(fn: Callable[[], object], calls: int) -> dict:
    """Kernels and copies of ``calls`` calls: total device time per call, count per call, top entries."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    events = [e for e in prof.events() if e.device_type.name == "CUDA"]
    total_us = sum(e.device_time for e in events) / calls
    by_name: dict[str, list[float]] = {}
    for e in events:
        by_name.setdefault(e.name[:70], []).append(e.device_time)
    top = sorted(((sum(v) / calls, len(v) / calls, k) for k, v in by_name.items()), reverse=True)
    starts = sorted(e.time_range.start for e in events)
    ends = sorted(e.time_range.end for e in events)
    return {"device_us_per_call": total_us, "entries_per_call": len(events) / calls,
            "span_us_per_call": (ends[-1] - starts[0]) / calls if events else 0.0,
            "top": [{"us_per_call": t, "count_per_call": c, "name": n} for t, c, n in top]}


def profile_model(name: str, image: np.ndarray, device: torch.device, repeats: int) -> dict:
    model = zoo_bench_model(name)
    out: dict = {"model": name}
    with model.open("cuda_graph", device) as engine, Predictor(engine, model.preprocessing, task=model.task) as predictor:
        frames = predictor.frame_buffer(1, *image.shape[:2])
        frames[...] = image
        frame = frames[0]
        x = example_input(model.inputs[0], 1, engine.device)
        for _ in range(30):
            predictor(frame)
            engine(x)
        key = predictor._frame_buffer_key([frame])
        graphs, layout_host = predictor._graphs, predictor._layouts[key]
        stream = torch.cuda.current_stream(device)
        arrays = layout_host[0].unpack(layout_host[1].numpy().copy())
        sync = stream.synchronize
        phases = {
            "frame_buffer_of + key lookup": lambda: predictor.pre.frame_buffer_of((frame,)),
            "graph launch (replay call only)": lambda: graphs.replay(key, None),
            "synchronize, GPU idle": sync,
            "unpack (copy + views)": lambda: layout_host[0].unpack(layout_host[1].numpy().copy()),
            "results dataclasses": lambda: predictor._results(arrays),
            "engine(x) host part (model only)": lambda: engine(x),
            "predictor(frame), wall incl. GPU": lambda: (predictor(frame)),
            "engine(x) + synchronize, wall": lambda: (engine(x), sync()),
        }
        out["host_ms"] = {k: host_ms(fn, repeats, sync) for k, fn in phases.items()}
        out["gpu_predictor"] = gpu_profile(lambda: predictor(frame), 20)
        out["gpu_model"] = gpu_profile(lambda: engine(x), 20)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=300)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        console.print("[red]needs a CUDA GPU[/]")
        return 2
    from bench.routes_gpu import frame_1280x720

    args.out.mkdir(parents=True, exist_ok=True)
    device = torch.device("cuda", 0)
    torch.backends.cudnn.benchmark = True
    result = {"machine": machine_info(), "command": " ".join(["python", *sys.argv]), "models": []}
    for name in ("efficientnet_lite0", "detr_like"):
        result["models"].append(profile_model(name, frame_1280x720(), device, args.repeats))
    (args.out / "predictor_profile.json").write_text(json.dumps(result, indent=1))
    for m in result["models"]:
        table = Table(title=f"{m['model']}: host phases (median ms, GPU idle)")
        table.add_column("phase")
        table.add_column("ms")
        for k, v in m["host_ms"].items():
            table.add_row(k, f"{v:.4f}")
        console.print(table)
        for which in ("gpu_predictor", "gpu_model"):
            g = m[which]
            table = Table(title=f"{m['model']} {which}: {g['device_us_per_call']:.1f} µs device time, "
                                f"{g['entries_per_call']:.0f} entries, span {g['span_us_per_call']:.1f} µs per call")
            for column in ("µs/call", "n/call", "name"):
                table.add_column(column)
            for t in g["top"][:12]:
                table.add_row(f"{t['us_per_call']:.1f}", f"{t['count_per_call']:.1f}", t["name"])
            console.print(table)
        diff = _kernel_diff(m["gpu_predictor"]["top"], m["gpu_model"]["top"])
        table = Table(title=f"{m['model']}: device time the predictor adds over the model, per kernel name")
        for column in ("µs/call", "n/call", "name"):
            table.add_column(column)
        for us, n, name in diff[:25]:
            table.add_row(f"{us:.1f}", f"{n:.1f}", name)
        console.print(table)
    result["variants"] = variants(device)
    (args.out / "predictor_profile.json").write_text(json.dumps(result, indent=1))
    table = Table(title="pre/post variants, each as its own CUDA graph (median µs of the replay)")
    table.add_column("variant")
    table.add_column("µs")
    for k, v in result["variants"].items():
        table.add_row(k, f"{v:.1f}")
    console.print(table)
    return 0


def _kernel_diff(pred: list[dict], model: list[dict]) -> list[tuple[float, float, str]]:
    base = {t["name"]: t for t in model}
    out = []
    for t in pred:
        b = base.get(t["name"], {"us_per_call": 0.0, "count_per_call": 0.0})
        out.append((t["us_per_call"] - b["us_per_call"], t["count_per_call"] - b["count_per_call"], t["name"]))
    return sorted(out, reverse=True)


def _two_stage_topk(flat: torch.Tensor, k: int, chunk: int) -> tuple[torch.Tensor, torch.Tensor]:
    batch, n = flat.shape
    pad = (-n) % chunk
    x = torch.nn.functional.pad(flat, (0, pad), value=float("-inf")) if pad else flat
    local_v, local_i = x.view(batch, -1, chunk).topk(min(k, chunk), dim=-1)
    base = torch.arange(0, n + pad, chunk, device=flat.device).view(1, -1, 1)
    v, j = local_v.flatten(1).topk(k, dim=1)
    return v, (local_i + base).flatten(1).gather(1, j)


def _query_pruned_topk(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact: the top-k pairs lie in the k queries with the largest max (at most k queries hold them)."""
    batch, queries, classes = logits.shape
    _, q = logits.amax(-1).topk(min(k, queries), dim=1)
    sub = logits.gather(1, q.unsqueeze(-1).expand(-1, -1, classes))
    v, j = sub.flatten(1).topk(k, dim=1)
    return v, q.gather(1, torch.div(j, classes, rounding_mode="floor")) * classes + j % classes


def variants(device: torch.device) -> dict[str, float]:
    """Pre/post pieces alone, each captured in a CUDA graph and replayed (median of 500)."""
    from trtforge.measure.timing import measure
    from trtforge.runtime.cuda_graph import capture

    u8 = torch.randint(0, 256, (1, 720, 1280, 3), dtype=torch.uint8, device=device)
    logits = torch.randn(1, 300, 80, device=device)
    cls_logits = torch.randn(1, 1000, device=device)
    pinned = torch.empty(2400, dtype=torch.uint8, pin_memory=True)
    small = torch.empty(2400, dtype=torch.uint8, device=device)
    F = torch.nn.functional

    def resize(dtype: torch.dtype, size: tuple[int, int]) -> Callable[[], torch.Tensor]:
        return lambda: F.interpolate(u8.permute(0, 3, 1, 2).to(dtype), size=size, mode="bilinear",
                                     align_corners=False, antialias=False)

    cases = {
        "u8->float32 (1280x720)": lambda: u8.permute(0, 3, 1, 2).float(),
        "u8->float16 (1280x720)": lambda: u8.permute(0, 3, 1, 2).half(),
        "u8->f32 + resize 224": resize(torch.float32, (224, 224)),
        "u8->f16 + resize 224": resize(torch.float16, (224, 224)),
        "u8->f32 + resize 640": resize(torch.float32, (640, 640)),
        "u8->f16 + resize 640": resize(torch.float16, (640, 640)),
        "topk 100 of 300x80, one pass": lambda: logits.flatten(1).topk(100, dim=1),
        "topk 100 of 300x80, two stage (chunks of 1000)": lambda: _two_stage_topk(logits.flatten(1), 100, 1000),
        "topk 100 of 300x80 in fp16, one pass": lambda: logits.half().flatten(1).topk(100, dim=1),
        "topk 100 of 300x80, queries pruned by their max": lambda: _query_pruned_topk(logits, 100),
        "topk 100 of 300x80 in fp16, queries pruned by their max": lambda: _query_pruned_topk(logits.half(), 100),
        "sort 300x80 descending, first 100": lambda: logits.flatten(1).sort(dim=1, descending=True)[0][:, :100],
        "floor: one tiny kernel": lambda: small.add_(1),
        "softmax + topk 5 of 1000": lambda: cls_logits.softmax(-1).topk(5, dim=-1),
        "softmax + sort 1000, first 5": lambda: [t[:, :5] for t in cls_logits.softmax(-1).sort(dim=-1, descending=True)],
        "topk 5 of 1000 logits, then softmax of those": lambda: (cls_logits.topk(5, dim=-1), cls_logits.logsumexp(-1)),
        "D2H 2.4 kB into pinned": lambda: pinned.copy_(small, non_blocking=True),
    }
    out = {}
    for name, fn in cases.items():
        call = capture(fn, device)
        out[name] = measure(call.graph.replay, device, warmup=20, repeats=500).median_ms * 1000.0
    return out


if __name__ == "__main__":
    raise SystemExit(main())
