"""Does this precision pay off here? An engine's steady-state time against an FP16 build of the same model.

The FP16 engine is the one beside it (``m_fp16.json`` next to ``m_int8.json``, same portability
suffix), else it is built on the fly from the FP32 reference ONNX beside the engine with the same
recorded options, through the engine cache (so the next check finds it there).

Example:
    >>> speedup = Speedup("out/m_fp16.json", baseline_ms=3.2, engine_ms=2.1, precision="int8", built=False)
    >>> speedup.line
    'int8 engine: 1.52× the speed of its FP16 build (2.100 ms against 3.200 ms per batch): it pays off here'
"""

from __future__ import annotations

import contextlib
import tempfile
from dataclasses import dataclass, fields
from pathlib import Path

from trtforge.core.sidecar import Sidecar, is_trtforge_sidecar

BASELINE_PRECISION = "fp16"
#: Below this ratio a lower precision is no gain (timing noise on a shared GPU is a few per cent).
PAYS_OFF = 1.05


@dataclass(frozen=True)
class Speedup:
    """The FP16 baseline's and the engine's steady-state milliseconds per batch, and where the baseline came from."""

    baseline: str
    baseline_ms: float
    engine_ms: float
    precision: str
    built: bool

    @property
    def ratio(self) -> float:
        return self.baseline_ms / self.engine_ms if self.engine_ms > 0 else float("inf")

    @property
    def pays_off(self) -> bool:
        return self.ratio >= PAYS_OFF

    @property
    def line(self) -> str:
        verdict = ("it pays off here" if self.pays_off else
                   "a slow-down: FP16 is faster here" if self.ratio < 1 else "no real gain here: FP16 does as well")
        built = "; FP16 built for this check" if self.built else ""
        return (f"{self.precision} engine: {self.ratio:.2f}× the speed of its FP16 build ({self.engine_ms:.3f} ms "
                f"against {self.baseline_ms:.3f} ms per batch{built}): {verdict}")


def sibling_fp16(sidecar: Sidecar) -> Path | None:
    """The FP16 sidecar beside ``sidecar`` (same name and portability suffix), when trtforge wrote one."""
    stem = f"{sidecar.name}_{sidecar.precision.built}"
    engine_stem = Path(sidecar.engine_file).stem
    if not engine_stem.startswith(stem):
        return None
    path = sidecar.folder / f"{sidecar.name}_{BASELINE_PRECISION}{engine_stem[len(stem):]}.json"
    return path if is_trtforge_sidecar(path) else None


def build_fp16(sidecar: Sidecar, output_dir: Path) -> Path:
    """Build the FP16 engine of ``sidecar``'s model from its FP32 reference ONNX, with the options its build
    recorded (batch, shapes, targets, ...), through the engine cache; the new sidecar's path."""
    from trtforge.core.config import CompileConfig
    from trtforge.pipeline import compile as compile_model

    reference = sidecar.verify_source_file("reference")
    recorded = dict(sidecar.builder.config or {})
    # the reference graph holds the cut and the NMS already: outputs= and postprocess= would apply them twice
    known = {f.name for f in fields(CompileConfig)} - {"precision", "output_dir", "progress", "allow_unaccelerated",
                                                       "outputs", "postprocess"}
    options = {k: v for k, v in recorded.items() if k in known and v is not None}
    options["name"] = sidecar.name
    art = compile_model(reference, precision=BASELINE_PRECISION, output_dir=output_dir, progress=False, **options)
    return art.sidecar_path


def fp16_baseline(sidecar: Sidecar, stack: contextlib.ExitStack) -> tuple[Path, bool]:
    """(the FP16 sidecar to time against, whether it was built now); a build goes to a folder on ``stack``."""
    found = sibling_fp16(sidecar)
    if found is not None:
        return found, False
    folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="trtforge-fp16-baseline-")))
    return build_fp16(sidecar, folder), True
