"""Try a small probe graph with the installed TensorRT: None when it builds, else TensorRT's one-line reason.

Example:
    >>> refusal(probe_bytes, "bf16")
    'UNSUPPORTED_NODE: ... Only FLOAT, HALF or INT8 input is supported for the HardSwish operator'
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from trtforge.builder.build import BuildFailedError, OnnxParseError, ShapeInputError, build_engine
from trtforge.core.config import CompileConfig

#: A reason longer than this is cut: Myelin's refusals carry the operation's dump (weights included).
REASON_CHARS = 160


def _short(reason: str) -> str:
    reason = " ".join(reason.split())
    return reason if len(reason) <= REASON_CHARS else reason[: REASON_CHARS - 1].rstrip() + "…"


def refusal(model_bytes: bytes, precision: str) -> str | None:
    """Build ``model_bytes`` (lowest optimisation level); TensorRT's reason when it refuses, else None.

    A probe whose op reads a shape tensor cannot stand alone: None (no verdict), not a refusal.
    """
    with tempfile.TemporaryDirectory(prefix="trtforge-probe-") as tmp:
        path = Path(tmp) / "probe.onnx"
        path.write_bytes(model_bytes)
        try:
            build_engine(path, CompileConfig(precision=precision, optimization_level=0), name="probe",
                         progress=False, source="probe")
        except OnnxParseError as exc:
            return _short(exc.failures[0][2])
        except BuildFailedError as exc:
            return _short(str(exc).split(": ", 1)[-1])
        except ShapeInputError:
            return None  # a computed integer input that sets shapes (a Reshape's): alone, its values are unknown
    return None
