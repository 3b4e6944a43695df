"""``trtforge demo``: EfficientNet-Lite0 with real weights → FP32 and FP16 engines, checked on real photos.

Example:
    >>> from trtforge.cli.demo import run_demo
    >>> rows = run_demo(output_dir=Path("trtforge_out"), crops=64)
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from trtforge.builder.targets import where_it_runs
from trtforge.cli.app import app, console, guarded

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True)
class DemoRow:
    precision: str
    build_seconds: float
    engine_mb: float
    top1_agreement: float
    rel_l2: float
    runs_on: str
    engine: Path


def ort_logits(onnx_path: Path, x: np.ndarray, input_name: str, batch: int = 16) -> np.ndarray:
    """Run ``onnx_path`` in ONNX Runtime on the CPU, in batches."""
    import numpy as np

    from trtforge.core.ort_session import session as ort_session

    session = ort_session(onnx_path)
    return np.concatenate([session.run(None, {input_name: x[i : i + batch]})[0] for i in range(0, len(x), batch)])


def run_demo(output_dir: Path = Path("trtforge_out"), crops: int = 128, console: Console | None = None) -> list[DemoRow]:
    import numpy as np
    import torch

    import trtforge
    from trtforge.zoo import efficientnet_lite0
    from trtforge.zoo.photos import normalize, photo_crops

    console = console or Console()
    console.print("[bold]trtforge demo[/]: EfficientNet-Lite0 (ImageNet weights) → TensorRT-RTX engines")
    model = efficientnet_lite0()
    example = (torch.zeros(1, 3, 224, 224),)
    artifacts = {}
    for precision in ("fp32", "fp16"):
        start = time.perf_counter()
        # The demo's folder holds the demo's own builds: a rerun after an upgrade (a changed export,
        # other passes) replaces them instead of refusing as it would for a user's other build.
        artifacts[precision] = trtforge.compile(model, example, precision=precision, batch=(1, 8, 32),
                                                output_dir=output_dir, progress=True, overwrite=True)
        console.print(f"  built {precision} in {time.perf_counter() - start:.1f} s (export included)")
    images = photo_crops(crops, seed=0)
    x = normalize(images, model.preprocessing)
    name = artifacts["fp32"].sidecar.inputs[0].name
    with console.status(f"ONNX Runtime on {crops} photo crops…"):
        ref = ort_logits(artifacts["fp32"].onnx_path, x, name)
        rows = []
        for precision, art in artifacts.items():
            out = ref if precision == "fp32" else ort_logits(art.onnx_path, x, name)
            rows.append(DemoRow(
                precision=precision,
                build_seconds=float(art.sidecar.builder.build_seconds or 0.0),
                engine_mb=art.sidecar.engine_size / 1e6,
                top1_agreement=float((out.argmax(1) == ref.argmax(1)).mean()),
                rel_l2=float(np.linalg.norm(out - ref) / np.linalg.norm(ref)),
                runs_on=where_it_runs(art.sidecar.builder),
                engine=art.engine_path,
            ))
    table = Table(title=f"EfficientNet-Lite0 → TensorRT-RTX ({crops} skimage photo crops, ONNX Runtime check)")
    for col in ("precision", "TensorRT build s", "engine MB", "top-1 agree", "rel. L2", "runs on", "engine"):
        table.add_column(col)
    for r in rows:
        table.add_row(r.precision, f"{r.build_seconds:.2f}", f"{r.engine_mb:.1f}", f"{r.top1_agreement:.3f}",
                      f"{r.rel_l2:.2e}", r.runs_on, r.engine.name)
    console.print(table)
    console.print("[dim]Engines were built on this machine with TensorRT-RTX; no engine was executed "
                  "(no supported GPU here). Agreement is measured on the graphs the engines were built from.[/]")
    return rows


@app.command()
@guarded
def demo(
    output_dir: Annotated[Path, typer.Option("-o", "--output-dir")] = Path("trtforge_out"),
    crops: Annotated[int, typer.Option(help="photo crops for the agreement check")] = 128,
) -> None:
    """EfficientNet-Lite0 → FP32 and FP16 engines, checked on real photos; prints a table."""
    run_demo(output_dir=output_dir, crops=crops, console=console)
