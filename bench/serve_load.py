"""Served throughput on Triton against the same route offline and against a null model, in one run.

For each server configuration (``--instances`` × ``--input-format``): ``trtforge serve`` running the
route, then the same server with a null model (zeros, no model: the serving path's own ceiling);
against each, after a ``--warmup-s`` load, a multi-process gRPC load on loopback
(``trtforge.measure.serving``) for each ``--transport`` × ``--inflight`` cell: every cell runs for a fixed
``--seconds`` (>= 15 s for published figures; a request count measured windows of 2.6-6.6 s that
read 20-30 % low), ``--repeats`` times, and the table shows the median and the spread (min-max). Offline: the same route through ``trtforge.load`` (uint8: the same
``FrameEngine`` the server runs, fed host frames) at the batch sizes the dynamic batcher formed
(mean rows per engine call, from Triton's metrics), measured before and after the served runs.

The levers, side by side in one run: model instances in separate processes (``--instances 1,4``),
uint8 frames preprocessed in the server (``--input-format native,uint8``: 4x fewer request bytes),
and Triton system shared memory for the inputs of local clients (``--transport grpc,shm``: the gRPC
message carries a region name, not the tensor). ``--budget-s`` bounds the run: a configuration (its served
server and its null twin, always together, so every served cell has its ceiling) starts only if it should end
within the budget, judged by the last configuration's duration; a skipped one is listed in the JSON and the
script exits 1, so a run that did not measure every cell it was asked for never passes for one that did.

    PYTHONPATH=. python bench/serve_load.py --route eager --inflight 4 --seconds 2 --warmup-s 1 --max-batch 8 --out /tmp/sl
    PYTHONPATH=. python bench/serve_load.py --route cuda_graph --model zoo:efficientnet_lite0 --devices 0 \\
        --inflight 128 --instances 4 --input-format uint8,native --transport shm --processes 8 \\
        --seconds 15 --repeats 2 --budget-s 420 --out "$OUT"                               # on the H200

Writes serve_load.json (every number) and prints the table.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from rich.console import Console
from rich.table import Table

import trtforge
from trtforge.core.errors import UserError
from trtforge.core.sidecar import read_sidecar, write_sidecar
from trtforge.measure.routes import machine_info, write_zoo_sidecar
from trtforge.measure.serving import run_load
from trtforge.measure.timing import measure
from trtforge.serve.batching import graph_buckets
from trtforge.serve.repository import batch_range
from trtforge.serve.server import ServeConfig, Server, free_ports

console = Console(width=200)
NULL_FACTORY = "trtforge.measure.serving:null_engine"


def artifact(model: str, folder: Path, max_batch: int) -> Path:
    """A zoo model's sidecar with a batch profile 1..max_batch (opt max_batch/2), or a given sidecar."""
    if not model.startswith("zoo:"):
        return Path(model)
    path = write_zoo_sidecar(folder, model.removeprefix("zoo:"))
    record = read_sidecar(path)
    first = record.inputs[0]
    dims = list(first.shape[1:])
    profile = {first.name: {"min": [1, *dims], "opt": [max(1, max_batch // 2), *dims], "max": [max_batch, *dims]}}
    path.unlink()
    return write_sidecar(path, dataclasses.replace(record, profiles=(profile,), path=None))


def request_inputs(sidecar: Path, input_format: str) -> dict[str, np.ndarray]:
    """One request: a row of the model's input, or one uint8 frame of the preprocessing record's size."""
    from trtforge.serve.frames import frame_specs

    record = read_sidecar(sidecar)
    rng = np.random.default_rng(0)
    if input_format == "uint8":
        spec = frame_specs(record)[0]
        return {spec.name: rng.integers(0, 256, (1, *spec.shape[1:]), dtype=np.uint8)}
    spec = record.inputs[0]
    return {spec.name: rng.random((1, *spec.shape[1:])).astype(spec.dtype)}


def counters(server: Server, model: str) -> dict[str, float]:
    """Rows inferred and engine calls (Triton's metrics), and rows per device (ours)."""
    from prometheus_client.parser import text_string_to_metric_families

    found: dict[str, float] = {"rows": 0.0, "calls": 0.0}
    for family in text_string_to_metric_families(server.metrics_text()):
        for s in family.samples:
            if s.labels.get("model") != model:
                continue
            if s.name == "nv_inference_count_total":
                found["rows"] += s.value
            elif s.name == "nv_inference_exec_count_total":
                found["calls"] += s.value
            elif s.name == "trtforge_padded_rows_total":
                found["padded"] = found.get("padded", 0.0) + s.value
            elif s.name in ("trtforge_gpu_input_rows_total", "trtforge_dma_input_rows_total"):
                key = s.name.removeprefix("trtforge_").removesuffix("_total")
                found[key] = found.get(key, 0.0) + s.value
            elif s.name == "trtforge_model_rows_total":
                key = f"rows@{s.labels.get('device', 'cpu')}"
                found[key] = found.get(key, 0.0) + s.value
    return found


#: Requests per client process when a run is bounded by time alone.
UNBOUNDED = 10**9


def served_runs(sidecar: Path, config: ServeConfig, args: argparse.Namespace, label: dict) -> list[dict]:
    """Start one server; warm it up; ``--repeats`` time-bound loads per transport × in-flight cell; stop it."""
    name = read_sidecar(sidecar).name
    inputs = request_inputs(sidecar, config.input_format)
    runs = []
    started = time.perf_counter()
    with Server([sidecar], config) as server:
        startup_s = time.perf_counter() - started
        run_load(server.url("grpc"), name, inputs, requests=UNBOUNDED, processes=args.processes,
                 threads=max(1, max(args.inflight) // args.processes), max_seconds=args.warmup_s)  # warm-up
        for transport, inflight in itertools.product(args.transport, args.inflight):
            for repeat in range(args.repeats):
                runs.append(_one_run(server, name, inputs, args, {**label, "transport": transport,
                                                                  "inflight": inflight, "repeat": repeat}, startup_s))
    return runs


def _one_run(server: Server, name: str, inputs: dict, args: argparse.Namespace, label: dict,
             startup_s: float) -> dict:
    before = counters(server, name)
    try:
        load = run_load(server.url("grpc"), name, inputs, requests=UNBOUNDED, processes=args.processes,
                        threads=max(1, label["inflight"] // args.processes), max_seconds=args.seconds,
                        transport=label["transport"])
    except RuntimeError as exc:  # recorded, and the other runs go on
        console.print(f"{label}: FAILED {exc}")
        return {**label, "error": str(exc)}
    after = counters(server, name)
    delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    batch = delta["rows"] / delta["calls"] if delta["calls"] else float("nan")
    per_device = {k.removeprefix("rows@"): v for k, v in delta.items() if k.startswith("rows@")}
    padded = delta.get("padded", 0.0) / (delta["rows"] + delta.get("padded", 0.0)) if delta["rows"] else 0.0
    console.print(f"{label}: {load.throughput:.1f} req/s over {load.seconds:.1f} s, p50 {load.p50_ms:.1f} ms, "
                  f"p99 {load.p99_ms:.1f} ms, mean batch {batch:.1f}, padded rows {padded:.1%}, failed {load.failed}")
    return {**label, "mean_batch": batch, "engine_calls": delta["calls"], "padded_fraction": padded,
            "rows_per_device": per_device, "gpu_input_rows": delta.get("gpu_input_rows", 0.0),
            "dma_input_rows": delta.get("dma_input_rows", 0.0), "startup_s": startup_s,
            **load.as_dict()}


def offline(sidecar: Path, route: str, device: str | None, batches: set[int], repeats: int,
            input_format: str) -> dict[int, float]:
    """Items per second of the route called directly at each batch size (uint8: host frames in)."""
    from trtforge.serve.frames import FrameEngine

    result = {}
    with trtforge.load(sidecar, route=route, device=device) as engine:
        call = FrameEngine(engine, read_sidecar(sidecar)) if input_format == "uint8" else engine
        one = request_inputs(sidecar, input_format)
        for batch in sorted(batches):
            row = next(iter(one.values()))
            x = np.repeat(row, batch, axis=0) if input_format == "uint8" else \
                torch.rand(batch, *engine.inputs[0].shape[1:], device=engine.device)
            result[batch] = measure(lambda x=x: call(x), torch.device(engine.device), warmup=3,
                                    repeats=repeats, batch=batch).throughput
    return result


def parse_args(argv: list[str]) -> argparse.Namespace:
    def ints(text: str) -> list[int]:
        return [int(v) for v in text.split(",")]

    def words(text: str) -> list[str]:
        return [v for v in text.split(",") if v]

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="zoo:efficientnet_lite0", help="zoo:NAME or a sidecar path")
    p.add_argument("--route", default="eager")
    p.add_argument("--inflight", default="4,8", type=ints, help="requests in flight, e.g. 64,128")
    p.add_argument("--processes", type=int, default=2, help="client processes")
    p.add_argument("--seconds", type=float, default=15.0, help="each load run lasts this long (>= 15 to publish)")
    p.add_argument("--warmup-s", type=float, default=3.0, help="load before a server's timed runs")
    p.add_argument("--repeats", type=int, default=2, help="timed runs per cell (median and spread reported)")
    p.add_argument("--budget-s", type=float, default=540.0,
                   help="a configuration (served and null) starts only if it should end within this many seconds "
                        "from the start (judged by the last configuration's duration); a skipped one exits 1")
    p.add_argument("--instances", default="1", type=ints, help="model instances per GPU (separate processes), "
                                                                "e.g. 1,4: each is a configuration")
    p.add_argument("--input-format", default="native", type=words, help="native and/or uint8 (configurations)")
    p.add_argument("--transport", default="grpc", type=words, help="grpc, shm and/or cuda_shm (GPU inputs; per configuration)")
    p.add_argument("--devices", default="", help="GPU indices for the instances, e.g. 0 or 0,1")
    p.add_argument("--servers", default="served,null", type=words,
                   help="served and/or null (the null model is the serving path's ceiling)")
    p.add_argument("--max-batch", type=int, default=32)
    p.add_argument("--max-delay-ms", type=float, default=2.0)
    p.add_argument("--offline-repeats", type=int, default=20)
    p.add_argument("--out", type=Path, default=Path("serve_load_out"))
    return p.parse_args(argv)


def main(argv: list[str]) -> dict:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    devices = tuple(int(d) for d in args.devices.split(",") if d)
    clock, runs, skipped, last_s = time.perf_counter(), [], [], 0.0
    with tempfile.TemporaryDirectory() as tmp:
        sidecar = artifact(args.model, Path(tmp), args.max_batch)
        device = f"cuda:{devices[0]}" if devices else None
        # offline at every size the served engine is called with (its graph buckets), to compare at the batch formed
        batches = set(graph_buckets(*batch_range(read_sidecar(sidecar))))
        before = {f: offline(sidecar, args.route, device, batches, args.offline_repeats, f) for f in args.input_format}
        for instances, input_format in itertools.product(args.instances, args.input_format):
            base = dict(route=args.route, instances=instances, devices=devices, max_delay_ms=args.max_delay_ms,
                        input_format=input_format)
            labels = [{"server": s, "instances": instances, "input_format": input_format}
                      for s in ("served", "null") if s in args.servers]
            # A configuration is its served server and its null twin, run together or not at all (a served cell
            # without its ceiling gives no ratio); it starts only if it should end within the budget, judged by
            # the last configuration's duration.
            if time.perf_counter() - clock + last_s > args.budget_s:
                skipped += labels
                continue
            started = time.perf_counter()
            for label in labels:
                runs += configuration_runs(sidecar, base, args, label)
            last_s = time.perf_counter() - started
        after = {f: offline(sidecar, args.route, device, batches, args.offline_repeats, f) for f in args.input_format}
    offline_ips = {f: {b: (before[f][b] + after[f][b]) / 2 for b in batches} for f in args.input_format}
    raw = {"before": before, "after": after}
    return report(args, runs, offline_ips, raw, skipped, time.perf_counter() - clock)


def configuration_runs(sidecar: Path, base: dict, args: argparse.Namespace, label: dict) -> list[dict]:
    """One server (the route, or the null model) of one configuration, on free ports; a failed start is a row."""
    factory = NULL_FACTORY if label["server"] == "null" else None
    ports = dict(zip(("http_port", "grpc_port", "metrics_port"), free_ports(), strict=True))
    try:
        return served_runs(sidecar, ServeConfig(**base, **ports, engine_factory=factory), args, label)
    except UserError as exc:  # a server that does not start is a row of the report, not the end of it
        console.print(f"{label}: server FAILED {exc}")
        return [{**label, "error": str(exc)}]


def nearest(batches: dict[int, float], mean_batch: float) -> int:
    """The measured offline batch size closest to the mean batch the server formed."""
    if math.isnan(mean_batch):
        return 1
    return min(batches, key=lambda b: abs(b - mean_batch))


CELL = ("instances", "input_format", "transport", "inflight")


def cells(runs: list[dict]) -> dict[tuple, dict]:
    """Runs grouped by server and cell: median and spread (min, max) of throughput and p99 over the repeats."""
    grouped: dict[tuple, list[dict]] = {}
    for run in (r for r in runs if "error" not in r):
        grouped.setdefault((run["server"], *(run[k] for k in CELL)), []).append(run)
    summary = {}
    for key, group in grouped.items():
        tput, p99 = [r["throughput"] for r in group], [r["p99_ms"] for r in group]
        summary[key] = {**{k: group[0][k] for k in ("server", *CELL)}, "repeats": len(group),
                        "seconds": [r["seconds"] for r in group], "throughput": float(np.median(tput)),
                        "throughput_min": min(tput), "throughput_max": max(tput), "p99_ms": float(np.median(p99)),
                        "p99_ms_max": max(p99), "p50_ms": float(np.median([r["p50_ms"] for r in group])),
                        "mean_batch": float(np.median([r["mean_batch"] for r in group])),
                        "padded_fraction": float(np.median([r.get("padded_fraction", 0.0) for r in group])),
                        "failed": sum(r["failed"] for r in group)}
    return summary


def compare(runs: list[dict], offline_ips: dict[str, dict[int, float]]) -> list[dict]:
    """Each served cell (medians of its repeats) beside its null-model twin and offline at the batch formed."""
    summary, rows = cells(runs), []
    for key, cell in summary.items():
        if cell["server"] != "served":
            continue
        null = summary.get(("null", *key[1:]))
        table = offline_ips[cell["input_format"]]
        batch = nearest(table, cell["mean_batch"])
        null_ips = null["throughput"] if null else float("nan")
        ceiling = min(table[batch], null_ips) if null else table[batch]
        target = 8000 if cell["input_format"] == "uint8" else 5000
        rows.append({**cell, "offline_batch": batch, "offline_throughput": table[batch], "null_throughput": null_ips,
                     "null_p99_ms": null["p99_ms"] if null else float("nan"),
                     "served_over_ceiling": cell["throughput"] / ceiling if ceiling else float("nan"),
                     "target_img_s": target, "meets_target": cell["throughput"] >= target and cell["p99_ms"] <= 50,
                     "meets_0.8": cell["throughput"] >= 0.8 * ceiling})
    return rows


def report(args: argparse.Namespace, runs: list[dict], offline_ips: dict, raw: dict, skipped: list[dict],
           seconds: float) -> dict:
    rows = compare(runs, offline_ips)
    table = Table(title=f"{args.model} on route {args.route}, devices {args.devices or 'cpu'}: served vs offline "
                        "vs null model (1 request = 1 image)")
    for column in ("instances", "input", "transport", "in flight", "runs × s", "served img/s (median)", "spread",
                   "p99 ms", "mean batch", "padded", "offline img/s @batch", "null req/s", "null p99 ms",
                   "served / min(offline, null)", "failed"):
        table.add_column(column, justify="right")
    for r in rows:
        table.add_row(str(r["instances"]), r["input_format"], r["transport"], str(r["inflight"]),
                      f"{r['repeats']} × {min(r['seconds']):.0f}", f"{r['throughput']:.1f}",
                      f"{r['throughput_min']:.4g}–{r['throughput_max']:.4g}", f"{r['p99_ms']:.1f}",
                      f"{r['mean_batch']:.1f}", f"{r['padded_fraction']:.1%}",
                      f"{r['offline_throughput']:.1f} @{r['offline_batch']}", f"{r['null_throughput']:.1f}",
                      f"{r['null_p99_ms']:.1f}", f"{r['served_over_ceiling']:.2f}", str(r["failed"]))
    console.print(table)
    for failed in (r for r in runs if "error" in r):
        console.print(f"failed: {failed}")
    if skipped:
        console.print(f"skipped (over --budget-s {args.budget_s:g}): {skipped}")
    best = max(rows, key=lambda r: r["throughput"], default=None)
    if best:
        console.print(f"best: {best['throughput']:.1f} img/s ({best['instances']} instances, {best['input_format']}, "
                      f"{best['transport']}, in flight {best['inflight']}); p99 {best['p99_ms']:.1f} ms")
    result = {"command": " ".join(["python", *sys.argv]), "machine": machine_info(), "date": time.strftime("%Y-%m-%d"),
              "seconds": seconds, "method": {"seconds_per_run": args.seconds, "warmup_s": args.warmup_s,
                                             "repeats": args.repeats, "statistic": "median of the repeats; spread "
                                             "min-max"}, "rows": rows, "null": [c for c in cells(runs).values()
                                                                                if c["server"] == "null"], "runs": runs, "skipped": skipped, "best": best,
              "offline": {f: {str(k): v for k, v in d.items()} for f, d in offline_ips.items()},
              "offline_before_after": {k: {f: {str(b): v for b, v in d.items()} for f, d in per.items()}
                                       for k, per in raw.items()}}
    (args.out / "serve_load.json").write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    skipped = main(sys.argv[1:])["skipped"]
    if skipped:  # the JSON is written; the run did not measure every cell it was asked for
        sys.exit(f"error: {len(skipped)} server(s) not measured (over --budget-s): {skipped}; raise --budget-s "
                 "or ask for fewer configurations")
