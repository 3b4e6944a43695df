"""Where an engine can run, said in words for tables and docs.

Example:
    >>> where_it_runs(BuilderRecord(flavour="tensorrt_rtx", targets=("sm86",)))
    'TensorRT-RTX: sm86 (Ampere)'
"""

from __future__ import annotations

from trtforge.core.gpu_targets import GENERATIONS, RTX_CCS
from trtforge.core.sidecar import BuilderRecord


def where_it_runs(builder: BuilderRecord) -> str:
    """Short text: the flavour and the GPU classes an engine built with ``builder`` targets."""
    flavour = builder.flavour or "?"
    targets = [t for t in builder.targets if t != "portable"]
    label = "TensorRT-RTX" if flavour == "tensorrt_rtx" else "TensorRT"
    if builder.hardware_compatibility:
        return f"{label}: {builder.hardware_compatibility} GPUs"
    if targets:
        return f"{label}: " + ", ".join(f"{t} ({GENERATIONS.get(t, '?')})" for t in targets)
    if flavour == "tensorrt_rtx":
        offered = builder.offered_targets or RTX_CCS
        return f"{label}: {offered[0]}–{offered[-1]} GPUs (portable)"
    return f"{label}: the GPU model it was built on"
