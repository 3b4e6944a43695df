"""Host side of a pageable frame: ways to get a 1280×720 uint8 numpy frame into pinned memory (and onto the GPU).

The predictor's pageable path copies the frame into its pinned staging buffer before the DMA;
this script times that copy on one machine, side by side (interleaved), so the fastest way can be
chosen from numbers:

* ``numpy``      one ``np.copyto`` into the pinned buffer (one thread);
* ``torch``      one ``Tensor.copy_`` (intra-op threads: ``torch.get_num_threads()``);
* ``threads_N``  ``np.copyto`` of N row bands on a pool of N threads (numpy drops the GIL);
* ``host_copy``  ``trtforge.runtime.staging.host_copy`` as shipped;
* ``memmove_N``  ``ctypes.memmove`` of N byte bands on a pool of N threads (ctypes drops the GIL);
* ``torch_4``    ``Tensor.copy_`` with ``torch.set_num_threads(4)`` around it;
* ``upload``     ``Preprocessor.upload`` as shipped (chunked memcpy + DMA, then synchronize);
* ``copy_dma``   the torch copy, then one DMA and a synchronize.

Frames rotate through 16 distinct arrays (44 MB) so the source is not always hot in cache;
``--same-frame`` reuses one.

Example:
    python3 bench/host_copy.py --out /tmp/host_copy --repeats 300
"""

from __future__ import annotations

import argparse
import ctypes
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch
from rich.console import Console
from rich.table import Table

from trtforge.core.preprocessing import PreprocessConfig
from trtforge.measure.routes import machine_info
from trtforge.vision.preprocess import Preprocessor, host_copy
from trtforge.zoo.efficientnet_lite import LITE0_PREPROCESSING

console = Console()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=300)
    parser.add_argument("--same-frame", action="store_true")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    rng = np.random.default_rng(0)
    frames = [rng.integers(0, 256, (720, 1280, 3), dtype=np.uint8) for _ in range(1 if args.same_frame else 16)]
    pinned = torch.empty((720, 1280, 3), dtype=torch.uint8, pin_memory=cuda)
    pinned_np = pinned.numpy()
    on_gpu = torch.empty((720, 1280, 3), dtype=torch.uint8, device=device)
    pre = Preprocessor(PreprocessConfig.from_dict(LITE0_PREPROCESSING), device)
    pools = {n: ThreadPoolExecutor(n) for n in (2, 4, 8)}

    def banded(n: int, frame: np.ndarray) -> None:
        bounds = np.linspace(0, frame.shape[0], n + 1).astype(int)
        list(pools[n].map(lambda i: np.copyto(pinned_np[bounds[i]:bounds[i + 1]], frame[bounds[i]:bounds[i + 1]]),
                          range(n)))

    def copy_dma(frame: np.ndarray) -> None:
        pinned.copy_(torch.from_numpy(frame))
        on_gpu.copy_(pinned, non_blocking=True)
        if cuda:
            torch.cuda.synchronize()

    def upload(frame: np.ndarray) -> None:
        pre.upload([frame], out=on_gpu[None])
        if cuda:
            torch.cuda.synchronize()

    def memmove(n: int, frame: np.ndarray) -> None:  # ctypes drops the GIL for the foreign call
        step = -(-frame.nbytes // n)
        dst, src = pinned_np.ctypes.data, frame.ctypes.data
        list(pools[n].map(lambda i: ctypes.memmove(dst + i * step, src + i * step, min(step, frame.nbytes - i * step)),
                          range(n)))

    def torch_threads(n: int, frame: np.ndarray) -> None:
        before = torch.get_num_threads()
        torch.set_num_threads(n)
        pinned.copy_(torch.from_numpy(frame))
        torch.set_num_threads(before)

    cases = {
        "numpy": lambda f: np.copyto(pinned_np, f),
        "host_copy": lambda f: host_copy(pinned_np, f),
        "memmove_4": lambda f: memmove(4, f),
        "memmove_8": lambda f: memmove(8, f),
        "torch_4": lambda f: torch_threads(4, f),
        "torch": lambda f: pinned.copy_(torch.from_numpy(f)),
        **{f"threads_{n}": (lambda f, n=n: banded(n, f)) for n in pools},
        "upload": upload,
        "copy_dma": copy_dma,
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    for i in range(args.repeats + 20):
        for name, case in cases.items():
            frame = frames[(i * len(cases) + len(times[name])) % len(frames)]
            t0 = time.perf_counter()
            case(frame)
            if i >= 20:
                times[name].append(time.perf_counter() - t0)
    rows = []
    for name, ts in times.items():
        us = np.asarray(ts) * 1e6
        rows.append({"case": name, "median_us": float(np.median(us)), "p90_us": float(np.percentile(us, 90)),
                     "gb_per_s": frames[0].nbytes / np.median(us) / 1e3})
    table = Table(title=f"1280×720×3 uint8 frame, pageable → pinned (torch threads {torch.get_num_threads()})")
    for column in ("case", "p50 µs", "p90 µs", "GB/s"):
        table.add_column(column)
    for r in rows:
        table.add_row(r["case"], f"{r['median_us']:.1f}", f"{r['p90_us']:.1f}", f"{r['gb_per_s']:.1f}")
    console.print(table)
    record = {"machine": machine_info(), "command": " ".join(["python", *sys.argv]),
              "torch_threads": torch.get_num_threads(), "frames": len(frames), "rows": rows}
    path = args.out / "host_copy.json"
    path.write_text(json.dumps(record, indent=1))
    console.print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
