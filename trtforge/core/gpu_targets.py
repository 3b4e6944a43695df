"""The GPU targets and hardware-compatibility levels trtforge knows, one table each: the builder, the
target words (``builder.targets``), the capability table (``builder.capability``) and ``trtforge doctor`` read
them; nothing else lists compute capabilities.

A ``GpuTarget`` is a compute capability (``"sm89"``), its generation as tables name it, and which flavours run
engines there: TensorRT-RTX (1.7's ``ComputeCapability`` enum), a TensorRT-RTX engine built without targets
(portable), full TensorRT 10/11 (Turing and newer, its support matrix). A ``HardwareLevel`` is a
``hardware_compatibility`` value, the TensorRT member it sets and the smallest compute capability it runs on.

Example:
    >>> RTX_CCS
    ('sm75', 'sm80', 'sm86', 'sm89', 'sm120', 'sm121')
    >>> FULL_TRT_MIN_CC, HARDWARE_LEVEL_MIN_CC
    (75, {'ampere_plus': 80})
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuTarget:
    """One compute capability: its name (``sm`` and the digits), its generation, where each flavour runs."""

    name: str
    generation: str | None  # None: tables print '?'
    rtx: bool
    rtx_portable: bool
    full: bool


@dataclass(frozen=True)
class HardwareLevel:
    """A ``hardware_compatibility`` value: the ``HardwareCompatibilityLevel`` member, the smallest compute
    capability it runs on (None: the one it was built on)."""

    name: str
    member: str
    min_cc: int | None


def cc_number(target: str) -> int:
    """``"sm89"`` → 89, ``"sm120"`` → 120 (so numeric order is hardware order)."""
    return int(target[2:]) if target[2:].isdigit() else 0


#: Every GPU target, in hardware order. TensorRT-RTX: 1.7's ``ComputeCapability`` enum. Portable (a TensorRT-RTX
#: engine built without targets): TensorRT-RTX support matrix (1.0-1.5, latest), note under "Hardware and
#: Precision": "by default portable across devices with compute capabilities 8.6, 8.9, and 12.0"; 12.1 (GB10)
#: is listed from 1.5 and shares 12.0's code. Full TensorRT 10/11: Turing and newer, its support matrix.
TARGETS: tuple[GpuTarget, ...] = (
    GpuTarget("sm75", "Turing", rtx=True, rtx_portable=False, full=True),
    GpuTarget("sm80", "Ampere A100", rtx=True, rtx_portable=False, full=True),
    GpuTarget("sm86", "Ampere", rtx=True, rtx_portable=True, full=True),
    GpuTarget("sm87", "Orin", rtx=False, rtx_portable=False, full=True),
    GpuTarget("sm89", "Ada", rtx=True, rtx_portable=True, full=True),
    GpuTarget("sm90", "Hopper", rtx=False, rtx_portable=False, full=True),
    GpuTarget("sm100", "Blackwell DC", rtx=False, rtx_portable=False, full=True),
    GpuTarget("sm103", None, rtx=False, rtx_portable=False, full=True),
    GpuTarget("sm110", None, rtx=False, rtx_portable=False, full=True),
    GpuTarget("sm120", "Blackwell", rtx=True, rtx_portable=True, full=True),
    GpuTarget("sm121", "GB10", rtx=True, rtx_portable=True, full=True),
)
#: Compute capabilities TensorRT-RTX runs engines on.
RTX_CCS: tuple[str, ...] = tuple(t.name for t in TARGETS if t.rtx)
#: Compute capabilities full TensorRT runs engines on.
FULL_CCS: tuple[str, ...] = tuple(t.name for t in TARGETS if t.full)
#: Where a TensorRT-RTX engine built without targets runs.
RTX_PORTABLE_TARGETS: tuple[str, ...] = tuple(t.name for t in TARGETS if t.rtx_portable)
#: The oldest GPU full TensorRT runs on (``sm`` digits).
FULL_TRT_MIN_CC: int = min(cc_number(cc) for cc in FULL_CCS)
#: Compute capability → GPU generation, for readable tables.
GENERATIONS: dict[str, str] = {t.name: t.generation for t in TARGETS if t.generation}

#: Every ``hardware_compatibility`` level (full TensorRT).
LEVELS: tuple[HardwareLevel, ...] = (
    HardwareLevel("ampere_plus", "AMPERE_PLUS", 80),
    HardwareLevel("same_compute_capability", "SAME_COMPUTE_CAPABILITY", None),
)
#: User-facing name → ``HardwareCompatibilityLevel`` member.
HARDWARE_LEVELS: dict[str, str] = {level.name: level.member for level in LEVELS}
#: ``hardware_compatibility`` level → the smallest compute capability it runs on.
HARDWARE_LEVEL_MIN_CC: dict[str, int] = {level.name: level.min_cc for level in LEVELS if level.min_cc is not None}
