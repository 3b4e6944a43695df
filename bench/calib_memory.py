"""INT8 calibration memory against the sample count: peak RSS of ``quantize_model`` for 16, 32 and 64 samples.

Each count runs in its own subprocess (``ru_maxrss`` is a process's high-water mark), on the same FP32
graph with the same batch size: the samples are the only difference. Reported per count: the RSS after
the graph and the samples are loaded (``base``), the peak during ``quantize_model`` and the peak of
Python/numpy allocations (``tracemalloc``; ONNX Runtime's own buffers are not traced). Calibration must
not grow with the sample count: the peaks' ratios (32/16, 64/16) should stay near 1, and the growth
per sample should be about one input sample (the samples themselves are loaded).

Models: EfficientNet-Lite0 from the zoo (real weights, 224×224), or the PP-OCRv4 det graph shipped in
``rapidocr_onnxruntime`` (the ``bench`` extra) at ``--size`` (default 480×480; big activations).
Samples are seeded normal noise in the input's shape: calibration statistics do not change memory.

Run:
    $ python bench/calib_memory.py                       # Lite0, 16/32/64 samples
    $ python bench/calib_memory.py --model ocr-det --size 480
    $ python bench/calib_memory.py --counts 16 32 64 128
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def lite0_graph(work: Path, size: int) -> tuple[Path, tuple[int, ...]]:
    """EfficientNet-Lite0 exported with a dynamic batch and cleaned (the build's FP32 reference)."""
    import torch

    from trtforge.capture.export import export_onnx
    from trtforge.passes.cleanup import cleanup
    from trtforge.passes.graph import load_ir, save_model
    from trtforge.zoo import efficientnet_lite0

    raw = export_onnx(efficientnet_lite0(), (torch.zeros(1, 3, size, size),), work / "raw.onnx",
                      input_names=["images"], output_names=["logits"])
    path = work / "lite0.onnx"
    save_model(cleanup(load_ir(raw)), path)
    return path, (3, size, size)


def ocr_det_graph(work: Path, size: int) -> tuple[Path, tuple[int, ...]]:
    """PP-OCRv4 det (rapidocr_onnxruntime 1.4.4) with its spatial dims fixed to ``size`` (batch stays dynamic)."""
    import importlib.util

    import onnx

    spec = importlib.util.find_spec("rapidocr_onnxruntime")
    if spec is None or spec.origin is None:
        sys.exit("the ocr-det model needs rapidocr_onnxruntime: pip install 'trtforge[bench]'")
    proto = onnx.load(str(Path(spec.origin).parent / "models" / "ch_PP-OCRv4_det_infer.onnx"))
    dims = proto.graph.input[0].type.tensor_type.shape.dim
    for i in (2, 3):
        dims[i].Clear()
        dims[i].dim_value = size
    path = work / "ocr_det.onnx"
    onnx.save(proto, str(path))
    return path, (3, size, size)


GRAPHS = {"lite0": (lite0_graph, 224), "ocr-det": (ocr_det_graph, 480)}


def rss_mb() -> float:
    """This process's peak RSS so far, in MB (``ru_maxrss`` is KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child(graph: Path, shape: tuple[int, ...], count: int, batch: int) -> dict:
    """One measurement (run in a fresh process): load graph and samples, then quantize."""
    import numpy as np
    import onnx

    from trtforge.core.config import QuantConfig
    from trtforge.quantize.quantizer import quantize_model

    model = onnx.load(str(graph))
    samples = np.random.default_rng(0).standard_normal((count, *shape)).astype(np.float32)
    base = rss_mb()
    tracemalloc.start()
    start = time.perf_counter()
    result = quantize_model(model, samples, QuantConfig(batch_size=batch, task="other"), progress=False)
    seconds = time.perf_counter() - start
    traced = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return {"count": count, "base_mb": base, "peak_mb": rss_mb(), "traced_peak_mb": traced, "seconds": seconds,
            "calibration_samples": result.report["samples"]["calibration"],
            "sample_mb": samples[0].nbytes / 2**20}


def measure(model: str, size: int, counts: list[int], batch: int) -> list[dict]:
    """Every count in its own subprocess (``python bench/calib_memory.py --child ...``)."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="trtforge-bench-calib-") as tmp:
        graph, shape = GRAPHS[model][0](Path(tmp), size)
        for count in counts:
            argv = [sys.executable, __file__, "--child", str(graph), json.dumps(shape), str(count), str(batch)]
            env = {**os.environ, "PYTHONPATH": str(ROOT)}
            done = subprocess.run(argv, capture_output=True, text=True, env=env, check=True)
            rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return rows


def report(model: str, size: int, batch: int, rows: list[dict]) -> None:
    first = rows[0]
    print(f"{model} {size}x{size}, batch {batch}: peak RSS of quantize_model per sample count")
    print("| samples | base RSS MB | peak RSS MB | peak / 16's | peak − base MB | traced peak MB | s |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['count']} | {r['base_mb']:.0f} | {r['peak_mb']:.0f} | {r['peak_mb'] / first['peak_mb']:.2f} | "
              f"{r['peak_mb'] - r['base_mb']:.0f} | {r['traced_peak_mb']:.0f} | {r['seconds']:.1f} |")
    last = rows[-1]
    per_sample = (last["peak_mb"] - first["peak_mb"]) / (last["count"] - first["count"])
    print(f"growth {per_sample:.1f} MB per extra sample (one input sample is {first['sample_mb']:.1f} MB); "
          f"{dt.date.today().isoformat()}, {platform.machine()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(GRAPHS), default="lite0")
    parser.add_argument("--size", type=int, default=None, help="input height = width (default: the model's)")
    parser.add_argument("--counts", type=int, nargs="+", default=[16, 32, 64])
    parser.add_argument("--batch", type=int, default=8, help="calibration batch size")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        graph, shape, count, batch = args.child
        print(json.dumps(child(Path(graph), tuple(json.loads(shape)), int(count), int(batch))))
        return
    size = args.size or GRAPHS[args.model][1]
    report(args.model, size, args.batch, measure(args.model, size, args.counts, args.batch))


if __name__ == "__main__":
    main()
