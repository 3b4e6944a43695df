"""INT8 quantization settings: ``QuantConfig`` (what the quantizer does, validated once).

``trtforge.quantize.quantizer.quantize_model`` runs the steps; this module holds only the config.

Example:
    >>> QuantConfig(calibrator="entropy", placement="auto").calibration_key()["calibrator"]
    'entropy'
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from trtforge.quantize import placement as placement_mod
from trtforge.quantize.budget import ErrorBudget, check_override, resolve_budget
from trtforge.quantize.calibrators import CALIBRATORS

PLACEMENTS = ("default", "auto")
TASKS = ("auto", "classification", "embedding", "other")


@dataclass(frozen=True)
class QuantConfig:
    """How to quantize. Defaults: MSE calibrator, guarded bias correction, RF-DETR placement rules, 20 % held back.

    Example:
        >>> QuantConfig(calibrator="percentile", percentile=99.99, smoothquant=0.5,
        ...             bias_correction=True, placement="auto", error_budget=0.005,  # KL for a classifier
        ...             exclude=(r"_fc",))
        >>> QuantConfig(placement="auto", error_budget=ErrorBudget.of(cosine=0.995, rel_l2=0.1))
    """

    calibrator: str = "mse"
    percentile: float = 99.99
    smoothquant: float | None = None  # alpha; None = off
    bias_correction: bool = True  # kept only when it lowers the held-back error
    placement: str = "default"
    # placement="auto" keeps layers in FP16 until this holds on the held-back samples. None: the task's
    # default (budget.TASK_BUDGETS); a float: the limit of the task's metric (classification: softmax
    # KL ≤ b; embedding: mean cosine ≥ b; other: relative L2 ≤ b); an ErrorBudget: exactly that.
    error_budget: float | ErrorBudget | None = None
    exclude: tuple[str, ...] = ()
    include: tuple[str, ...] = ()
    max_images: int = 128
    holdout: float = 0.2  # share of samples held back for the accuracy report (never calibrated on)
    batch_size: int = 8
    num_bins: int = 2048
    cache_dir: Path | None = None
    task: str = "auto"  # classification | embedding | other: picks the metrics and the default budget

    def __post_init__(self) -> None:
        if self.calibrator not in CALIBRATORS:
            raise ValueError(f"calibrator={self.calibrator!r}; choose one of {', '.join(CALIBRATORS)}")
        if self.placement not in PLACEMENTS:
            raise ValueError(f"placement={self.placement!r}; choose 'default' (rules) or 'auto' (measured)")
        if self.smoothquant is not None and not 0.0 <= self.smoothquant <= 1.0:
            raise ValueError(f"smoothquant alpha={self.smoothquant} must lie in [0, 1] (0.5 is usual), or None")
        if not 0.0 < self.holdout < 1.0:
            raise ValueError(f"holdout={self.holdout} must lie in (0, 1), e.g. 0.2")
        if self.task not in TASKS:
            raise ValueError(f"task={self.task!r}; choose one of {', '.join(TASKS)}")
        check_override(self.error_budget)
        if self.task != "auto":
            resolve_budget(self.task, self.error_budget)  # a float out of the task metric's range fails here
        # Tuples, so the frozen config hashes and compares by value even when given lists.
        object.__setattr__(self, "exclude", tuple(self.exclude))
        object.__setattr__(self, "include", tuple(self.include))
        placement_mod.validate_patterns(self.exclude, "exclude")
        placement_mod.validate_patterns(self.include, "include")

    def calibration_key(self) -> dict[str, Any]:
        """The settings that change the scales (part of the calibration cache key)."""
        return {"calibrator": self.calibrator, "percentile": self.percentile if self.calibrator == "percentile" else None,
                "num_bins": self.num_bins, "smoothquant": self.smoothquant}

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["cache_dir"] = str(self.cache_dir) if self.cache_dir else None
        data["exclude"], data["include"] = list(self.exclude), list(self.include)
        if isinstance(self.error_budget, ErrorBudget):
            data["error_budget"] = self.error_budget.record()
        return data
