"""ONNX Runtime sessions with the optimisations that mis-evaluate or crash our graphs turned off.

Every place that runs a graph in ONNX Runtime (the reference, calibration, accuracy reports, the
ONNX Runtime route, the demo) goes through :func:`session` so the workarounds live in one table.

Example:
    >>> sess = session(Path("model_fp16.onnx"))
    >>> sess.run(None, {"images": x})[0].shape
    (8, 1000)
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import onnxruntime as ort

#: ((optimizer name, why it is disabled), ...): graph transformers known to break our graphs.
DISABLED_OPTIMIZERS: tuple[tuple[str, str], ...] = (
    ("WeightBiasQuantization",
     "multiplies Q/DQ scales in FP16 when the graph carries FP16 scales; the product underflows and conv "
     "biases come out as garbage (EfficientNet-Lite0 top-1 agreement fell from 0.82 to 0.01)"),
    ("MatmulTransposeFusion",
     "segfaults while creating a CPU session for FP16 transformer blocks (LayerNorm + attention), "
     "seen with onnxruntime 1.32"),
)


def session(
    model: Path | str | bytes,
    providers: Sequence[str] | None = None,
    threads: int | None = None,
    memory_arena: bool = True,
) -> ort.InferenceSession:
    """An InferenceSession (CPU unless ``providers`` says otherwise) with the table above applied.

    ``memory_arena=False``: tensors are freed to the system after each run instead of kept in ONNX
    Runtime's CPU arena, which otherwise grows with every differently sized batch (bench/calib_memory.py).
    """
    options = ort.SessionOptions()
    # Errors reach the caller as exceptions; ORT would also print them, in colour, to the terminal.
    options.log_severity_level = 3
    options.enable_cpu_mem_arena = memory_arena
    if threads is not None:
        options.intra_op_num_threads = threads
    source = model if isinstance(model, bytes) else str(model)
    return ort.InferenceSession(
        source, options, providers=list(providers or ["CPUExecutionProvider"]),
        disabled_optimizers=[name for name, _ in DISABLED_OPTIMIZERS],
    )
