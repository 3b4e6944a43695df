"""Engine cache: a second ``compile`` of EfficientNet-Lite0 against the first, export included.

Also measures an engine-key hit (same ONNX file, fresh request cache: passes run, build skipped),
an ONNX source cold and hit (issue 15: the hit must be >= 10x faster), and the engine sizes of a
TensorRT-RTX build matrix, for docs/portability.md. The ONNX cold compile runs in a cache folder
without entries but with the op-support table the first compile filled (``op_support/``: which ops
TensorRT refuses, probed once per TensorRT version), so it costs load, passes, build, store and
writes; the cold compile into a brand-new folder (op probes included) is reported beside it.

Run:
    $ python bench/cache.py                 # prints rich tables and the markdown rows for docs/benchmarks.md
    $ python bench/cache.py --repeats 3 --matrix
    $ python bench/cache.py --repeats 0 --matrix      # engine sizes only
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import platform
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

import trtforge
from trtforge.core import trt
from trtforge.pipeline import build_matrix
from trtforge.zoo import efficientnet_lite0

console = Console()


def _timed(fn):
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def one_repeat(model: torch.nn.Module, example: tuple, tmp: Path) -> dict:
    """Miss (export + passes + build + store), request-key hit, and engine-key hit, in one fresh cache."""

    def run(source, out: str, **kw):
        kw.setdefault("cache_dir", tmp / "cache")
        return _timed(lambda: trtforge.compile(source, example if source is model else None, precision="fp16",
                                               output_dir=tmp / out, progress=False, **kw))

    miss_s, miss = run(model, "a")
    hit_s, hit = run(model, "b")
    assert miss.sidecar.builder.cache["hit"] is False and hit.sidecar.builder.cache["hit"] is True
    assert hit.engine_path.read_bytes() == miss.engine_path.read_bytes()
    # Engine-key hit: the same graph from an ONNX file, which the cache knows as an engine but not as
    # a request (ONNX loaded and passes run, build skipped).
    onnx_s, onnx_art = run(miss.reference_onnx_path, "c", name="efficientnet_lite0")
    # An ONNX source, cold (no entry; the op-support table known: load, passes, build, store) against its hit.
    source = tmp / "source.onnx"
    source.write_bytes(miss.reference_onnx_path.read_bytes())
    shutil.copytree(tmp / "cache" / "op_support", tmp / "onnx_cache" / "op_support")
    onnx_cold_s, _ = run(source, "d", cache_dir=tmp / "onnx_cache")
    onnx_hit_s, onnx_hit = run(source, "e", cache_dir=tmp / "onnx_cache")
    assert onnx_hit.sidecar.builder.cache["hit"] is True
    onnx_new_folder_s, _ = run(source, "f", cache_dir=tmp / "new_cache")  # op probes run too
    return {"miss_s": miss_s, "hit_s": hit_s, "onnx_s": onnx_s, "onnx_hit": onnx_art.sidecar.builder.cache["hit"],
            "onnx_cold_s": onnx_cold_s, "onnx_hit_s": onnx_hit_s, "onnx_new_folder_s": onnx_new_folder_s,
            "build_s": miss.sidecar.builder.build_seconds,
            "entry_mb": sum(p.stat().st_size for p in (tmp / "cache" / "blobs").iterdir() if p.is_file()) / 1e6,
            "engine_mb": miss.sidecar.engine_size / 1e6}


def measure(repeats: int) -> list[dict]:
    model = efficientnet_lite0()
    example = (torch.zeros(1, 3, 224, 224),)
    rows = []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory(prefix="trtforge-bench-cache-") as tmp:
            rows.append(one_repeat(model, example, Path(tmp)))
    return rows


def matrix() -> list[tuple[str, int, float]]:
    """EfficientNet-Lite0 FP16: one engine per target, the multi-target engine, and the portable one."""
    model = efficientnet_lite0()
    example = (torch.zeros(1, 3, 224, 224),)
    with tempfile.TemporaryDirectory(prefix="trtforge-bench-matrix-") as tmp:
        common = {"precision": "fp16", "output_dir": tmp, "cache_dir": Path(tmp) / "cache", "progress": False}
        arts = build_matrix(model, example, targets=["sm80", "sm86", "sm89", "sm120"], console=console, **common)
        arts.append(trtforge.compile(model, example, **common))
        return [(",".join(a.sidecar.builder.targets), a.sidecar.engine_size, a.sidecar.builder.build_seconds)
                for a in arts]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--matrix", action="store_true", help="also build the sm80/86/89/120 matrix")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.repeats > 0:
        rows = measure(args.repeats)
        table = Table(title=f"EfficientNet-Lite0 FP16, {trt.info().flavour} {trt.info().version}")
        for col in ("run", "miss s (export+passes+build)", "hit s", "speed-up", "ONNX engine-key hit s", "build s",
                    "ONNX source cold s", "ONNX source hit", "ONNX speed-up", "ONNX cold, new folder s"):
            table.add_column(col)
        for i, r in enumerate(rows):
            table.add_row(str(i), f"{r['miss_s']:.2f}", f"{r['hit_s'] * 1e3:.0f} ms", f"{r['miss_s'] / r['hit_s']:.0f}×",
                          f"{r['onnx_s']:.2f} ({'hit' if r['onnx_hit'] else 'miss'})", f"{r['build_s']:.2f}",
                          f"{r['onnx_cold_s']:.2f}", f"{r['onnx_hit_s'] * 1e3:.0f} ms",
                          f"{r['onnx_cold_s'] / r['onnx_hit_s']:.1f}×", f"{r['onnx_new_folder_s']:.2f}")
        console.print(table)
        miss = statistics.median(r["miss_s"] for r in rows)
        hit = statistics.median(r["hit_s"] for r in rows)
        onnx_s = statistics.median(r["onnx_s"] for r in rows)
        onnx_cold = statistics.median(r["onnx_cold_s"] for r in rows)
        onnx_hit = statistics.median(r["onnx_hit_s"] for r in rows)
        onnx_new = statistics.median(r["onnx_new_folder_s"] for r in rows)
        onnx_ratio = statistics.median(r["onnx_cold_s"] / r["onnx_hit_s"] for r in rows)
        console.print(f"entry {rows[0]['entry_mb']:.2f} MB stored (blobs), engine {rows[0]['engine_mb']:.2f} MB")
        stamp = dt.date.today().isoformat()
        machine = f"{platform.machine()}, {torch.get_num_threads()} threads, no GPU"
        console.print("\nmarkdown:")
        console.print(f"| {stamp} | {machine} | {trt.info().flavour} {trt.info().version} | {miss:.2f} s | "
                      f"{hit * 1e3:.0f} ms | {miss / hit:.0f}× | {onnx_s:.2f} s | {onnx_cold:.2f} s | "
                      f"{onnx_hit * 1e3:.0f} ms | {onnx_ratio:.1f}× | {onnx_new:.2f} s |", soft_wrap=True, markup=False)
    if args.matrix:
        sizes = matrix()
        t = Table(title="build matrix (EfficientNet-Lite0 FP16)")
        for col in ("targets", "engine bytes", "build s"):
            t.add_column(col)
        for name, size, secs in sizes:
            t.add_row(name, f"{size:,}", f"{secs:.2f}")
        console.print(t)
        for name, size, secs in sizes:
            console.print(f"| {name} | {size:,} | {secs:.2f} |", soft_wrap=True, markup=False)


if __name__ == "__main__":
    main()
