"""ONNX Runtime sessions with the optimisations that mis-evaluate or crash our graphs turned off.

Every place that runs a graph in ONNX Runtime (the reference, calibration, accuracy reports, the
ONNX Runtime route, the demo) goes through :func:`session` so the workarounds live in one table.

Example:
    >>> sess = session(Path("model_fp16.onnx"))
    >>> sess.run(None, {"images": x})[0].shape
    (8, 1000)
"""

from __future__ import annotations

import os
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
    ("ReluQuantRewrite",
     "drops a Relu in front of a FLOAT8E4M3FN QuantizeLinear as if FP8 could not hold negatives (it treats "
     "zero point 0 as the type's minimum); the FP8 Q/DQ graph then computes without the Relu (onnxruntime 1.32)"),
    ("ClipQuantRewrite",
     "fails to create the session for a Clip (ReLU6) in front of a FLOAT8E4M3FN QuantizeLinear: it reads the "
     "zero point's type as an integer range (\"Unexpected data type for QuantizeLinear input y_zero_point of "
     "17\", onnxruntime 1.32), so FP8 of any ReLU6 network could not be calibrated or measured"),
)

#: (session config entry, value, why): settings that keep ONNX Runtime computing what the graph says.
SESSION_CONFIG: tuple[tuple[str, str, str], ...] = (
    ("session.qdq_matmulnbits_accuracy_level", "0",
     "ONNX Runtime fuses a weight DequantizeLinear (INT8/INT4) + MatMul into MatMulNBits and, at its default "
     "level 4, quantizes the activations to INT8 as well: a weight-only graph would be measured as W8A8 "
     "(max error 0.06 against 5e-6 on a 256x128 MatMul, onnxruntime 1.32); 0 computes in the input's type"),
)


def session(
    model: Path | str | bytes,
    providers: Sequence[str] | None = None,
    threads: int | None = None,
    memory_arena: bool = True,
    initializers: dict[str, ort.OrtValue] | None = None,
) -> ort.InferenceSession:
    """An InferenceSession (CPU unless ``providers`` says otherwise) with the table above applied.

    ``memory_arena=False``: tensors are freed to the system after each run instead of kept in ONNX
    Runtime's CPU arena, which otherwise grows with every differently sized batch (bench/calib_memory.py).
    ``threads`` defaults to ``OMP_NUM_THREADS`` where it is set, as PyTorch's CPU threads do, so one variable
    bounds both CPU back ends of a process (else ONNX Runtime's default: one thread per core).
    ``initializers``: the graph's large initializers as OrtValues (``trtforge.core.ort_weights``), which the
    returned session keeps.
    """
    options = ort.SessionOptions()
    # Errors reach the caller as exceptions; ORT would also print them, in colour, to the terminal.
    options.log_severity_level = 3
    options.enable_cpu_mem_arena = memory_arena
    for key, value, _ in SESSION_CONFIG:
        options.add_session_config_entry(key, value)
    threads = threads if threads is not None else omp_threads()
    if threads is not None:
        options.intra_op_num_threads = threads
    source = model if isinstance(model, bytes) else str(model)
    kwargs = {"providers": list(providers or ["CPUExecutionProvider"]),
              "disabled_optimizers": [name for name, _ in DISABLED_OPTIMIZERS]}
    if not initializers:
        return ort.InferenceSession(source, options, **kwargs)
    from trtforge.core.ort_weights import SharedWeightsSession

    options.add_external_initializers(list(initializers), list(initializers.values()))
    return SharedWeightsSession(source, options, initializers, **kwargs)


def omp_threads() -> int | None:
    """``OMP_NUM_THREADS`` as a positive thread count, or None where it is unset or not one.

    Example:
        >>> omp_threads()  # run as OMP_NUM_THREADS=1 python ...
        1
    """
    value = os.environ.get("OMP_NUM_THREADS", "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else None
