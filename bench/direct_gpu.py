"""A partitioned direct-path model on the GPU: PyTorch parts on CUDA, engine parts through the double.

Issue 12's acceptance: a model with an op no converter handles (a custom ``torch.library`` op) runs
partitioned and matches PyTorch; on the H200 the PyTorch parts run on the GPU. No TensorRT engine
runs on an H200 (TensorRT-RTX refuses sm90), so the engine partitions run through the reference
evaluator (TensorRT's documented layer semantics, tests/doubles' role) on host memory: each engine
call copies its inputs to the host and its outputs back to the caller's device, as an engine bound to
another device would need. The folder is partitioned and built with TensorRT-RTX here, on the CPU,
and loaded on the GPU machine as a user would load it (sha256 of every plan checked).

    PYTHONPATH=.:tests/doubles python bench/direct_gpu.py --save /tmp/direct_jiggle     # here: build
    PYTHONPATH=.:tests/doubles python bench/direct_gpu.py --folder /tmp/direct_jiggle --out "$OUT"  # GPU
    PYTHONPATH=.:tests/doubles python bench/direct_gpu.py --fresh --out "$OUT"  # GPU, another torch release

Writes direct_gpu.json (every number) and prints the table.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import torch
from custom_op_model import conv_jiggle_head
from rich.console import Console
from rich.table import Table

from trtforge.convert.evaluator import evaluate
from trtforge.convert.partition import EngineModule, partition
from trtforge.convert.saved import load_partitioned, save_partitioned

BATCHES = (1, 3, 4)


def host_hop_runner(engine: EngineModule, feeds: dict) -> list:
    """The double for an engine partition: evaluate its recorded network on the host, hand the
    outputs back on the device the inputs came from."""
    device = next(iter(feeds.values())).device
    outputs = evaluate(engine.record, {name: t.detach().cpu() for name, t in feeds.items()})
    return [t.to(device) for t in outputs]


def example(batch: int, device: str) -> torch.Tensor:
    return torch.randn(batch, 3, 8, 8, generator=torch.Generator().manual_seed(batch)).to(device)


def cuda_kernels(module: torch.nn.Module, x: torch.Tensor) -> int:
    """How many CUDA kernels one call launches (0 on the CPU)."""
    if x.device.type != "cuda":
        return 0
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        module(x)
        torch.cuda.synchronize()
    return sum(1 for e in prof.events() if e.device_type.name == "CUDA")


def timed(fn, x: torch.Tensor, repeats: int = 50) -> float:
    """Mean milliseconds per call, synchronised on CUDA."""
    sync = torch.cuda.synchronize if x.is_cuda else (lambda: None)
    fn(x)
    sync()
    start = time.perf_counter()
    for _ in range(repeats):
        fn(x)
    sync()
    return (time.perf_counter() - start) / repeats * 1e3


def run(folder: Path | None, device: str) -> dict:
    reference = conv_jiggle_head().to(device)
    if folder is None:  # partition here (torch.export of another torch release names the splits differently)
        loaded, report = partition(conv_jiggle_head(), (example(2, "cpu"),), batch=(1, 2, 4), min_block_size=2,
                                   runner=host_hop_runner, build=False)
    else:
        loaded, report = load_partitioned(folder, runner=host_hop_runner)
    loaded = loaded.to(device)
    engines = [m for m in loaded.modules() if isinstance(m, EngineModule)]
    rows = []
    with torch.inference_mode():
        for batch in BATCHES:
            x = example(batch, device)
            got, want = loaded(x), reference(x)
            cpu_want = conv_jiggle_head()(x.cpu())
            rows.append({
                "batch": batch, "output_device": str(got.device),
                "max_abs_vs_pytorch_same_device": float((got - want).abs().max()),
                "max_abs_vs_pytorch_cpu": float((got.cpu() - cpu_want).abs().max()),
                "matches": bool(torch.allclose(got, want, rtol=1e-4, atol=1e-5)),
            })
        x = example(4, device)
        kernels = cuda_kernels(loaded, x)
        ms_partitioned, ms_pytorch = timed(loaded, x), timed(reference, x)
    return {
        "device": device, "gpu": torch.cuda.get_device_name(0) if device.startswith("cuda") else None,
        "engines": {name: count for name, count in report.engines.items()}, "pytorch_parts": report.pytorch,
        "engine_plans_bytes": [len(e.plan or b"") for e in engines], "jiggle_in_pytorch": "jiggle" in loaded.code,
        "rows": rows, "cuda_kernels_per_call": kernels,
        "ms_per_call_batch4": {"partitioned_host_hop": ms_partitioned, "pytorch_eager": ms_pytorch},
    }


def show(result: dict) -> None:
    table = Table(title=f"partitioned conv→jiggle→head on {result['gpu'] or result['device']}")
    for column in ("batch", "output device", "max |Δ| vs PyTorch (same device)", "vs PyTorch CPU", "match"):
        table.add_column(column)
    for row in result["rows"]:
        table.add_row(str(row["batch"]), row["output_device"], f"{row['max_abs_vs_pytorch_same_device']:.2e}",
                      f"{row['max_abs_vs_pytorch_cpu']:.2e}", "yes" if row["matches"] else "NO")
    console = Console(width=140)
    console.print(table)
    console.print(f"engines {result['engines']}, PyTorch parts {list(result['pytorch_parts'])}, "
                  f"CUDA kernels per call {result['cuda_kernels_per_call']}, ms/call (batch 4) "
                  f"{ {k: round(v, 3) for k, v in result['ms_per_call_batch4'].items()} }")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--save", type=Path, help="partition and build here (TensorRT-RTX), save the folder")
    parser.add_argument("--folder", type=Path, help="a folder --save wrote: load and run it")
    parser.add_argument("--fresh", action="store_true", help="partition here without building (no TensorRT)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.save:
        module, report = partition(conv_jiggle_head(), (example(2, "cpu"),), batch=(1, 2, 4), min_block_size=2)
        print(save_partitioned(args.save, module, report), report.engines)
        return
    if not (args.folder or args.fresh):
        parser.error("give --save FOLDER (build), --folder FOLDER (run it) or --fresh (partition and run)")
    result = run(None if args.fresh else args.folder, args.device)
    result.update(machine=f"{platform.node()} {platform.machine()}", torch=torch.__version__,
                  date_utc=time.strftime("%Y-%m-%d %H:%M", time.gmtime()))
    show(result)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "direct_gpu.json").write_text(json.dumps(result, indent=2) + "\n")
    if not all(row["matches"] for row in result["rows"]):
        raise SystemExit("partitioned outputs differ from PyTorch")


if __name__ == "__main__":
    main()
