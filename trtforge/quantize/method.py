"""What a quantization method is: a pass over a ``State`` that proposes a ``Candidate``.

A method (``trtforge.quantize.methods``) has a ``name`` (its report key and row), the ``stage`` of the flow it
runs at, the ``keep`` rule that decides its candidate, whether it gets a time row, ``applies(config, spec)``
and ``run(state) -> Candidate | Skipped``. It neither times nor measures nor writes the report: the one
driver (``trtforge.quantize.driver``) does that for every method, on either path (ONNX graph or PyTorch module).

Example:
    >>> METHOD = Method(name="gptq", stage="placed", keep="better", applies=lambda config, spec: True,
    ...                 run=lambda state: Candidate(state, {"layers": 0}, changed=False))
    >>> METHOD.stage_of(QuantConfig())
    'placed'
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Union

import numpy as np

from trtforge.core.budget import ErrorBudget
from trtforge.core.config import QuantConfig
from trtforge.core.quant_plan import QuantPlan
from trtforge.core.sidecar_records import MethodRecord, SidecarRecord
from trtforge.quantize.calibration import CalibrationSet

if TYPE_CHECKING:
    import onnx_ir as ir
    import torch

    from trtforge.quantize.placement import Analysis
    from trtforge.quantize.precision import PrecisionSpec

#: Where in the flow a method runs, in order: on the FP32 graph before calibration; on the calibrated graph
#: (its candidate may be calibrated again) before placement; on the plan placement starts from (before
#: ``placement="auto"`` searches); on the placed plan; on the finished graph and its simulation.
STAGES: tuple[str, ...] = ("graph", "calibrated", "start_plan", "placed", "finished")
Stage = Literal["graph", "calibrated", "start_plan", "placed", "finished"]

#: How the driver decides a candidate (held-back relative L2 mean, "before": the state the method started from):
#: budget: lower, and an error budget that held before still holds; better: the method changed something and
#: it is lower; not_worse: not higher; always: kept unmeasured (a transform the flow then calibrates).
KEEPS: tuple[str, ...] = ("budget", "better", "not_worse", "always")
Keep = Literal["budget", "better", "not_worse", "always"]

Outputs = Sequence[np.ndarray]
Model = Union["ir.Model", "torch.nn.Module"]


@dataclass(frozen=True)
class Tools:
    """What a path lends the methods: its simulation on the held-back samples, and (ONNX path) calibration and
    the plan placement starts from, for a method that changes the graph before placement."""

    simulate: Callable[[Model, QuantPlan], Outputs]
    calibrate: Callable[[Model], tuple[Analysis, QuantPlan, str | None]] | None = None
    start_plan: Callable[[Analysis, QuantPlan], QuantPlan] | None = None


@dataclass(frozen=True)
class State:
    """The flow as a method finds it: the graph (or module), its plan, the data and the settings."""

    path: str  # "onnx" (an onnx_ir graph) or "direct" (a PyTorch module)
    model: Model
    plan: QuantPlan | None
    data: CalibrationSet
    config: QuantConfig
    spec: PrecisionSpec | None
    budget: ErrorBudget
    task: str
    reference_out: Outputs  # the FP32 graph's held-back outputs
    tools: Tools
    reference: Model | None = None  # the FP32 graph (fine-tuning distils from it)
    input_names: tuple[str, ...] = ()  # the direct path's module inputs
    analysis: Analysis | None = None  # the ONNX path's analysis and full (calibrated) plan
    full: QuantPlan | None = None
    cache: str | None = None  # the calibration cache's answer for the graph calibrated
    sim_out: Outputs | None = None  # the held-back outputs of ``model`` simulated at ``plan``, once measured
    progress: object | None = None  # a rich progress bar, or None


@dataclass(frozen=True)
class Candidate:
    """What a method proposes: the state if kept, its own report fields, and whether it changed anything.
    ``outputs``: its simulation's held-back outputs where the method measured them; else the driver does."""

    state: State
    record: Mapping[str, object]
    changed: bool = True
    outputs: Outputs | None = None


@dataclass(frozen=True)
class Skipped:
    """A method that found nothing to try: ``record`` (when given) is its report entry; no time row."""

    record: Mapping[str, object] | None = None


@dataclass(frozen=True)
class Method:
    """One quantization method: one module of ``trtforge.quantize.methods`` and one entry of ``METHODS``."""

    name: str
    stage: Stage | Callable[[QuantConfig], Stage]
    keep: Keep
    applies: Callable[[QuantConfig, PrecisionSpec | None], bool]
    run: Callable[[State], Candidate | Skipped]
    row: bool = True  # a time row in the report's ``methods`` (AWQ-lite and SmoothQuant have none)
    record: type[SidecarRecord] = MethodRecord  # the typed report entry (and the sidecar schema's)

    def stage_of(self, config: QuantConfig) -> Stage:
        return self.stage(config) if callable(self.stage) else self.stage
