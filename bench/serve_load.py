"""Served throughput on Triton against the same route offline and against a null model, in one run.

For each in-flight count: a bounded multi-process gRPC load on loopback (``trtforge.bench.serving``)
against ``trtforge serve`` running the route, then against the same server with a null model (zeros,
no model: the serving path's own ceiling). Offline: the same route through ``trtforge.load`` at the
batch sizes the dynamic batcher formed (mean rows per engine call, from Triton's metrics).

    PYTHONPATH=. python bench/serve_load.py --route eager --inflight 4,8 --requests 200 --max-batch 8 --out /tmp/sl
    PYTHONPATH=. python bench/serve_load.py --route cuda_graph --model zoo:efficientnet_lite0 \\
        --inflight 64,128 --devices 0 --instances 4 --requests 20000 --out "$OUT"      # on the H200

Writes serve_load.json (every number) and prints the table.
"""

from __future__ import annotations

import argparse
import dataclasses
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
from trtforge.bench.routes import machine_info, write_zoo_sidecar
from trtforge.bench.serving import run_load
from trtforge.bench.timing import measure
from trtforge.core.sidecar import read_sidecar, write_sidecar
from trtforge.serve.server import ServeConfig, Server

console = Console(width=180)


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


def counters(server: Server, model: str) -> tuple[float, float]:
    """(rows inferred, engine calls) from Triton's metrics."""
    from prometheus_client.parser import text_string_to_metric_families

    rows = calls = 0.0
    for family in text_string_to_metric_families(server.metrics_text()):
        for s in family.samples:
            if s.labels.get("model") == model and s.name == "nv_inference_count_total":
                rows += s.value
            if s.labels.get("model") == model and s.name == "nv_inference_exec_count_total":
                calls += s.value
    return rows, calls


def served_runs(sidecar: Path, config: ServeConfig, inputs: dict, args: argparse.Namespace, label: str) -> list[dict]:
    name = read_sidecar(sidecar).name
    runs = []
    with Server([sidecar], config) as server:
        run_load(server.url("grpc"), name, inputs, requests=4 * args.processes, processes=args.processes,
                 threads=2, max_seconds=60)  # warm-up
        for inflight in args.inflight:
            before = counters(server, name)
            load = run_load(server.url("grpc"), name, inputs, requests=args.requests, processes=args.processes,
                            threads=max(1, inflight // args.processes), max_seconds=args.max_seconds)
            after = counters(server, name)
            calls = after[1] - before[1]
            batch = (after[0] - before[0]) / calls if calls else float("nan")
            runs.append({"server": label, "inflight": inflight, "mean_batch": batch, **load.as_dict()})
            console.print(f"{label} in flight {inflight}: {load.throughput:.1f} req/s, p50 {load.p50_ms:.1f} ms, "
                          f"p99 {load.p99_ms:.1f} ms, mean batch {batch:.1f}, failed {load.failed}")
    return runs


def offline(sidecar: Path, route: str, device: str | None, batches: set[int], repeats: int) -> dict[int, float]:
    """Items per second of the route called directly, at each batch size."""
    result = {}
    with trtforge.load(sidecar, route=route, device=device) as engine:
        spec = engine.inputs[0]
        for batch in sorted(batches):
            x = torch.rand(batch, *spec.shape[1:], device=engine.device)
            result[batch] = measure(lambda x=x: engine(x), torch.device(engine.device), warmup=3,
                                    repeats=repeats, batch=batch).throughput
    return result


def main(argv: list[str]) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="zoo:efficientnet_lite0", help="zoo:NAME or a sidecar path")
    p.add_argument("--route", default="eager")
    p.add_argument("--inflight", default="4,8", type=lambda s: [int(v) for v in s.split(",")])
    p.add_argument("--processes", type=int, default=2, help="client processes")
    p.add_argument("--requests", type=int, default=200, help="requests per in-flight setting (bounded)")
    p.add_argument("--max-seconds", type=float, default=120.0, help="time bound per load run")
    p.add_argument("--instances", type=int, default=1)
    p.add_argument("--devices", default="", help="GPU indices for the instances, e.g. 0")
    p.add_argument("--max-batch", type=int, default=32)
    p.add_argument("--max-delay-ms", type=float, default=2.0)
    p.add_argument("--offline-repeats", type=int, default=20)
    p.add_argument("--out", type=Path, default=Path("serve_load_out"))
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    devices = tuple(int(d) for d in args.devices.split(",") if d)
    with tempfile.TemporaryDirectory() as tmp:
        sidecar = artifact(args.model, Path(tmp), args.max_batch)
        spec = read_sidecar(sidecar).inputs[0]
        inputs = {spec.name: np.random.default_rng(0).random((1, *spec.shape[1:])).astype(spec.dtype)}
        base = dict(route=args.route, instances=args.instances, devices=devices, max_delay_ms=args.max_delay_ms)
        device = f"cuda:{devices[0]}" if devices else None
        candidates = {1, 2, 4, 8, 16, 32, 64, args.max_batch}
        batches = {b for b in candidates if b <= args.max_batch}
        before = offline(sidecar, args.route, device, batches, args.offline_repeats)  # offline around the
        runs = served_runs(sidecar, ServeConfig(**base), inputs, args, "served")  # served runs: a busy
        after = offline(sidecar, args.route, device, batches, args.offline_repeats)  # machine shows here
        runs += served_runs(sidecar, ServeConfig(**base, engine_factory="trtforge.bench.serving:null_engine"),
                            inputs, args, "null")
        offline_ips = {b: (before[b] + after[b]) / 2 for b in batches}
    return report(args, runs, offline_ips, {"before": before, "after": after})


def nearest(batches: dict[int, float], mean_batch: float) -> int:
    """The measured offline batch size closest to the mean batch the server formed."""
    if math.isnan(mean_batch):
        return 1
    return min(batches, key=lambda b: abs(b - mean_batch))


def report(args: argparse.Namespace, runs: list[dict], offline_ips: dict[int, float], raw: dict) -> dict:
    table = Table(title=f"{args.model} on route {args.route}: served vs offline vs null model (req = 1 image)")
    for column in ("in flight", "served req/s", "p50 ms", "p99 ms", "mean batch", "offline img/s @batch",
                   "null req/s", "served / min(offline, null)"):
        table.add_column(column, justify="right")
    rows = []
    for run in (r for r in runs if r["server"] == "served"):
        null = next(r for r in runs if r["server"] == "null" and r["inflight"] == run["inflight"])
        batch = nearest(offline_ips, run["mean_batch"])
        ceiling = min(offline_ips[batch], null["throughput"])
        ratio = run["throughput"] / ceiling if ceiling else float("nan")
        rows.append({**run, "offline_batch": batch, "offline_throughput": offline_ips[batch],
                     "null_throughput": null["throughput"], "served_over_ceiling": ratio})
        table.add_row(str(run["inflight"]), f"{run['throughput']:.1f}", f"{run['p50_ms']:.1f}", f"{run['p99_ms']:.1f}",
                      f"{run['mean_batch']:.1f}", f"{offline_ips[batch]:.1f} @{batch}", f"{null['throughput']:.1f}",
                      f"{ratio:.2f}")
    console.print(table)
    result = {"command": " ".join(["python", *sys.argv]), "machine": machine_info(), "date": time.strftime("%Y-%m-%d"),
              "rows": rows, "runs": runs, "offline": {str(k): v for k, v in offline_ips.items()},
              "offline_before_after": {k: {str(b): v for b, v in d.items()} for k, d in raw.items()}}
    (args.out / "serve_load.json").write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
