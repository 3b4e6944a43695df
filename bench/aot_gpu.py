"""The `compiled` route from an AOTInductor package: export beside the engine, reload without model code, time it.

For each zoo model: write a sidecar (the PyTorch routes never read the engine bytes), export the
model with ``trtforge.runtime.load.export_aot_beside`` (dynamic batch 1–8, FP16 on the GPU), load
it back with ``trtforge.load(path, route="compiled")`` (which picks up ``<name>_aot_<device>.pt2``
and never imports the model), check it against eager FP32 on the same input, then time it
model-only, interleaved with the ``eager`` and ``cuda_graph`` routes in one loop. A package whose
loader crashes (the probe's child process dies) is recorded as a failed check with its message.

Example:
    python3 bench/aot_gpu.py --out /tmp/aot --repeats 300
    python3 bench/aot_gpu.py --out /tmp/aot --quick --models efficientnet_lite0 --batches 1   # CPU dry run
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

import trtforge
from trtforge.measure.routes import (
    ZOO_BENCH_MODELS,
    BenchResult,
    example_input,
    relative_error,
    start_bench_script,
    write_zoo_sidecar,
)
from trtforge.measure.timing import measure_interleaved
from trtforge.runtime.aot_probe import AotPackageError
from trtforge.runtime.load import export_aot_beside

console = Console()

def run_model(name: str, folder: Path, device: torch.device, batches: list[int], warmup: int, repeats: int,
              result: BenchResult) -> None:
    path = write_zoo_sidecar(folder, name)
    console.log(f"{name}: exporting the AOTInductor package (dynamic batch 1–8)")
    t0 = time.perf_counter()
    package = export_aot_beside(path, device, batch=(1, 8))
    export_s = time.perf_counter() - t0
    console.log(f"{name}: {package.name}, {package.stat().st_size / 1e6:.1f} MB, exported in {export_s:.1f} s")
    t0 = time.perf_counter()
    try:
        aot = trtforge.load(path, route="compiled", device=device)
    except AotPackageError as exc:  # the loader crashed in the probe's child process: record it, go on
        console.print(f"[red]{name}: {exc}[/]")
        result.checks.append({"model": name, "route": "compiled(aot)", "batch": None, "rel_error": float("nan"),
                              "top1_agreement": None, "ok": False, "error": str(exc), "export_s": export_s,
                              "load_s": time.perf_counter() - t0, "package_bytes": package.stat().st_size})
        return
    load_s = time.perf_counter() - t0  # includes the probe: a child process that loads the package first
    if getattr(aot, "aot_package", None) != package:
        raise AssertionError(f"{name}: the compiled route did not load the package {package}")
    eager = trtforge.load(path, route="eager", device=device)
    graph = trtforge.load(path, route="cuda_graph", device=device)
    try:
        for batch in batches:
            x = example_input(aot.inputs[0], batch, device)
            reference = {k: v.clone() for k, v in eager(x).items()}
            out = aot(x)
            errors = {k: relative_error(out[k], reference[k]) for k in reference}
            agree = None
            if name == "efficientnet_lite0":
                agree = float((out["logits"].argmax(-1) == reference["logits"].argmax(-1)).float().mean())
            ok = all(e < 3e-2 for e in errors.values())
            result.checks.append({"model": name, "route": "compiled(aot)", "batch": batch, "rel_error": max(errors.values()),
                                  "per_output": errors, "top1_agreement": agree, "ok": ok,
                                  "export_s": export_s, "load_s": load_s, "package_bytes": package.stat().st_size})
            if not ok:
                raise AssertionError(f"{name} b{batch}: the AOT package disagrees with eager FP32: {errors}")
            console.log(f"{name} b{batch}: rel error {max(errors.values()):.2e}; timing eager, cuda_graph, aot")
            calls = {"eager": lambda e=eager, x=x: e(x), "cuda_graph": lambda e=graph, x=x: e(x),
                     "compiled(aot)": lambda e=aot, x=x: e(x)}
            stats = measure_interleaved(calls, device, warmup=warmup, repeats=repeats, batch=batch)
            for route, st in stats.items():
                result.add(name, route, batch, "model", st, interleaved=True)
    finally:
        for engine in (aot, eager, graph):
            engine.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--models", nargs="+", default=list(ZOO_BENCH_MODELS), choices=list(ZOO_BENCH_MODELS))
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 8])
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=300)
    parser.add_argument("--quick", action="store_true", help="tiny repeats (a dry run on the CPU)")
    args = parser.parse_args()
    if args.quick:
        args.warmup, args.repeats = 1, 3
    if any(not 1 <= b <= 8 for b in args.batches):
        parser.error(f"--batches must lie in the package's range 1–8, got {args.batches}")
    device, result = start_bench_script(args.out, sys.argv)
    console.print(result.machine)
    with tempfile.TemporaryDirectory() as folder:
        for name in args.models:
            run_model(name, Path(folder), device, args.batches, args.warmup, args.repeats, result)
            result.save_json(args.out / "aot_gpu.json")
    table = Table(title="model only, median ms (interleaved in one loop); compiled(aot) = the .pt2, no model code")
    for column in ("model", "batch", "eager", "cuda_graph", "compiled(aot)", "aot / cuda_graph"):
        table.add_column(column)
    medians = {(r["model"], r["route"], r["batch"]): r["median_ms"] for r in result.rows}
    for name in args.models:
        for batch in args.batches:
            if (name, "compiled(aot)", batch) not in medians:
                continue
            e, g, a = (medians[(name, r, batch)] for r in ("eager", "cuda_graph", "compiled(aot)"))
            table.add_row(name, str(batch), f"{e:.3f}", f"{g:.3f}", f"{a:.3f}", f"{a / g:.2f}")
    console.print(table)
    checks = Table(title="AOT package against eager FP32")
    for column in ("model", "batch", "rel error", "top-1", "export s", "load s", "MB"):
        checks.add_column(column)
    for c in result.checks:
        checks.add_row(c["model"], str(c["batch"]), "load failed" if "error" in c else f"{c['rel_error']:.2e}",
                       str(c["top1_agreement"]),
                       f"{c['export_s']:.1f}", f"{c['load_s']:.2f}", f"{c['package_bytes'] / 1e6:.1f}")
    console.print(checks)
    console.print(f"wrote {result.save_json(args.out / 'aot_gpu.json')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
