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

from trtforge.bench.routes import example_input, machine_info, zoo_bench_model
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
    top = sorted(((sum(v) / calls, len(v) / calls, k) for k, v in by_name.items()), reverse=True)[:12]
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
        shape = (1, *image.shape)
        staging = predictor.pre.staging(shape)
        key = (shape, "frame_buffer", staging.data_ptr())
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
            for t in g["top"]:
                table.add_row(f"{t['us_per_call']:.1f}", f"{t['count_per_call']:.1f}", t["name"])
            console.print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
