"""The predictor against the model alone, from the process's first seconds on, at batch 1 and 8.

Batch 1, EfficientNet-Lite0 on the ``cuda_graph`` route with the predictor's defaults (fused
preprocessing), 1280×720 frames: for ``--window-s`` seconds right after the process's first compile
(the predictor's first call), the model alone and the predictor from a frame on the GPU, from
``frame_buffer()``, from pageable arrays the caller already holds (a decoder's buffers) and from a new
pageable array per frame (the caller's allocation and copy included) are called in turn; the table gives each second's
median and its ratio to the model alone (a stall while Inductor's compile-worker pool starts shows
up there). Then the same five, steady, through ``measure_interleaved``.

Batch 8: the model alone, the plain predictor, and ``PipelinedPredictor`` over ``--batches``
batches (upload + preprocessing of batch i+1 overlap batch i's engine call): time per batch
against the model alone called back to back.

    PYTHONPATH=. python bench/predictor_pipeline.py --out "$OUT"                        # on the GPU machine
    PYTHONPATH=. python bench/predictor_pipeline.py --device cpu --route eager --window-s 2 --batches 4 \\
        --repeats 3 --out /tmp/pp                                                        # the logic, on a CPU

Writes predictor_pipeline.json and prints the tables.
"""

from __future__ import annotations

import time

PROCESS_START = time.monotonic()  # noqa: E402 - the clock starts before the heavy imports

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import sys  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from trtforge.measure.routes import example_input, machine_info, zoo_bench_model  # noqa: E402
from trtforge.measure.timing import measure_interleaved  # noqa: E402
from trtforge.vision import PipelinedPredictor, Predictor  # noqa: E402

console = Console(width=160)


def _pools() -> int:
    module = sys.modules.get("torch._inductor.async_compile")
    return len(getattr(module, "_pool_set", ())) if module is not None else 0


def _sync(device: torch.device) -> Callable[[], None]:
    return (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)


def batch_one(engine, predictor: Predictor, image: np.ndarray, device: torch.device, window_s: float,
              repeats: int) -> dict:
    """The first ``window_s`` seconds after the first compile, per second; then steady."""
    sync = _sync(device)
    x = example_input(engine.inputs[0], 1, device)
    buffer = predictor.frame_buffer(1, *image.shape[:2])
    buffer[...] = image
    on_gpu = torch.from_numpy(image.copy()).to(device)
    # "pageable": frames in the caller's own NumPy arrays (a decoder's output buffers, 4 in turn);
    # "pageable_new": a new array per frame, so the caller's own allocation and copy are in the time.
    decoded, turn = [image.copy() for _ in range(4)], iter(range(1 << 62))
    calls = {"model": lambda: (engine(x), sync()), "gpu_frame": lambda: predictor(on_gpu),
             "frame_buffer": lambda: predictor(buffer[0]),
             "pageable": lambda: predictor(decoded[next(turn) % len(decoded)]),
             "pageable_new": lambda: predictor(image.copy())}
    t0 = time.monotonic()
    calls["frame_buffer"]()  # the process's first compile (fused preprocessing) and the first capture
    first_compile = {"ends_s_after_process_start": time.monotonic() - PROCESS_START,
                     "first_call_s": time.monotonic() - t0, "compile_worker_pools": _pools()}
    for name in ("gpu_frame", "pageable", "pageable_new", "model"):  # their graphs: captured before the window
        calls[name]()
    start, samples = time.monotonic(), {k: [] for k in calls}
    while time.monotonic() - start < window_s:
        for name, fn in calls.items():
            t = time.perf_counter()
            fn()
            samples[name].append((time.monotonic() - start, (time.perf_counter() - t) * 1000.0))
    seconds = []
    for second in range(math.ceil(window_s)):
        row = {k: float(np.median([ms for at, ms in v if second <= at < second + 1] or [np.nan]))
               for k, v in samples.items()}
        seconds.append({"second": second, **row, **{f"{k}_over_model": row[k] / row["model"]
                                                    for k in calls if k != "model"}})
    window = {k: float(np.median([ms for _, ms in v])) for k, v in samples.items()}
    steady = measure_interleaved(dict(calls), device, warmup=min(10, repeats), repeats=repeats)
    steady_ms = {k: s.median_ms for k, s in steady.items()}
    return {"first_compile": first_compile, "window_s": window_s,
            "window_start_s_after_process_start": start - PROCESS_START, "per_second": seconds,
            "window_median_ms": window, "window_over_model": {k: window[k] / window["model"] for k in calls},
            "worst_second_over_model": {k: float(np.nanmax([s[f"{k}_over_model"] for s in seconds] + [0.0]))
                                        for k in calls if k != "model"},
            "steady_median_ms": steady_ms, "steady_over_model": {k: steady_ms[k] / steady_ms["model"] for k in calls},
            "compile_worker_pools_after": _pools()}


def in_place_check(predictor: Predictor, image: np.ndarray, device: torch.device, calls: int = 12) -> dict:
    """The caller's arrays pinned in place give the results their frames give from the GPU: two arrays
    in turn, refilled with a new frame before every call (a stale or early DMA would show)."""
    arrays, mismatches = [image.copy() for _ in range(2)], 0
    for i in range(calls):
        frame = arrays[i % 2]
        frame[...] = np.roll(image, 37 * (i + 1), axis=1)
        got, want = predictor(frame), predictor(torch.from_numpy(frame.copy()).to(device))
        mismatches += not (np.array_equal(got.class_id, want.class_id) and np.array_equal(got.score, want.score))
    pins = predictor.pre._in_place  # the bench looks inside: which arrays the predictor pinned
    return {"calls": calls, "mismatches": mismatches,
            "pinned_in_place_bytes": pins.pinned_bytes() if pins is not None else 0}


def batch_eight(engine, predictor: Predictor, image: np.ndarray, device: torch.device, batches: int,
                repeats: int) -> dict:
    """Plain and pipelined predictor at batch 8 against the model alone."""
    sync = _sync(device)
    x = example_input(engine.inputs[0], 8, device)
    buffer = predictor.frame_buffer(8, *image.shape[:2])
    buffer[...] = image
    sources = {"gpu_frame": [torch.from_numpy(image.copy()).to(device) for _ in range(8)],
               "frame_buffer": list(buffer), "pageable": [image.copy() for _ in range(8)]}
    plain = measure_interleaved({"model": lambda: engine(x), **{k: (lambda f=f: predictor(f)) for k, f in sources.items()}},
                                device, warmup=min(5, repeats), repeats=repeats, batch=8)
    engine(x)
    sync()
    t = time.perf_counter()
    for _ in range(batches):
        engine(x)
    sync()
    model_ms = (time.perf_counter() - t) * 1000.0 / batches
    pipelined = {}
    with PipelinedPredictor(predictor) as pipe:
        for name, frames in sources.items():
            list(pipe.run([frames] * min(4, batches)))  # captures and warm-up
            t = time.perf_counter()
            for _ in pipe.run([frames] * batches):
                pass
            pipelined[name] = (time.perf_counter() - t) * 1000.0 / batches
    return {"model_ms_back_to_back": model_ms, "batches": batches,
            "plain_median_ms": {k: s.median_ms for k, s in plain.items()},
            "plain_over_model": {k: s.median_ms / plain["model"].median_ms for k, s in plain.items()},
            "pipelined_ms_per_batch": pipelined,
            "pipelined_over_model": {k: v / model_ms for k, v in pipelined.items()}}


def _print(result: dict) -> None:
    one = result["batch1"]
    table = Table(title=f"batch 1, first {one['window_s']:g} s after the first compile (ended "
                        f"{one['first_compile']['ends_s_after_process_start']:.1f} s after process start; "
                        f"compile-worker pools: {one['first_compile']['compile_worker_pools']}): ms, × model")
    kinds = ("gpu_frame", "frame_buffer", "pageable", "pageable_new")
    for column in ("second", "model", *kinds):
        table.add_column(column, justify="right")
    for s in one["per_second"]:
        table.add_row(str(s["second"]), f"{s['model']:.3f}", *(f"{s[k]:.3f} ({s[k + '_over_model']:.2f}×)"
                                                               for k in kinds))
    table.add_row("window", f"{one['window_median_ms']['model']:.3f}",
                  *(f"{one['window_median_ms'][k]:.3f} ({one['window_over_model'][k]:.2f}×)" for k in kinds))
    table.add_row("steady", f"{one['steady_median_ms']['model']:.3f}",
                  *(f"{one['steady_median_ms'][k]:.3f} ({one['steady_over_model'][k]:.2f}×)" for k in kinds))
    console.print(table)
    eight = result["batch8"]
    table = Table(title="batch 8: ms per batch, × model alone")
    for column in ("frames", "plain predictor", "pipelined"):
        table.add_column(column, justify="right")
    for k in ("gpu_frame", "frame_buffer", "pageable"):
        table.add_row(k, f"{eight['plain_median_ms'][k]:.3f} ({eight['plain_over_model'][k]:.2f}×)",
                      f"{eight['pipelined_ms_per_batch'][k]:.3f} ({eight['pipelined_over_model'][k]:.2f}×)")
    table.add_row("model alone", f"{eight['plain_median_ms']['model']:.3f}", f"{eight['model_ms_back_to_back']:.3f}")
    console.print(table)


def main(argv: list[str]) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--route", default="cuda_graph")
    parser.add_argument("--window-s", type=float, default=10.0)
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--batches", type=int, default=200)
    args = parser.parse_args(argv)
    from bench.routes_gpu import frame_1280x720

    device = torch.device(args.device)
    args.out.mkdir(parents=True, exist_ok=True)
    model = zoo_bench_model("efficientnet_lite0")
    image = frame_1280x720()
    result = {"command": " ".join(["python", *sys.argv]), "machine": machine_info(), "date": time.strftime("%Y-%m-%d"),
              "route": args.route, "frame": list(image.shape)}
    with model.open(args.route, device) as engine, \
            Predictor(engine, model.preprocessing, task=model.task) as predictor:
        result["compile_preprocessing"] = predictor.compile_preprocessing
        result["batch1"] = batch_one(engine, predictor, image, device, args.window_s, args.repeats)
        result["in_place"] = in_place_check(predictor, image, device)
        console.print(f"pinned in place: {result['in_place']}")
        result["batch8"] = batch_eight(engine, predictor, image, device, args.batches, max(1, args.repeats // 4))
    (args.out / "predictor_pipeline.json").write_text(json.dumps(result, indent=1))
    _print(result)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
