"""The direct path's entry points: convert a module to a plan, or report its coverage.

Example:
    >>> plan, record = convert_module(model, (torch.randn(2, 3, 224, 224),), batch=(1, 8, 32))
    >>> evaluate(record.record, {"x": torch.randn(4, 3, 224, 224)})   # the reference evaluator
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from trtforge.convert.build import build_plan
from trtforge.convert.converters import source_hash
from trtforge.convert.lower import Lowered, export_program, lower_graph, program_constants
from trtforge.convert.network import Record
from trtforge.core.errors import InvalidArgument

PRECISIONS: dict[str, torch.dtype] = {"fp32": torch.float32, "float32": torch.float32, "fp16": torch.float16,
                                      "float16": torch.float16, "bf16": torch.bfloat16, "bfloat16": torch.bfloat16}


@dataclass(frozen=True)
class Conversion:
    """What the direct path made: the recorded network, its input/output names, folded and converted
    nodes, nodes kept FP32 (with the reason), the converter-source hash, and the build time."""

    record: Record
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    converted: dict[str, str] = field(default_factory=dict)
    folded: tuple[str, ...] = ()
    fp32_nodes: dict[str, str] = field(default_factory=dict)
    converter_hash: str = ""
    build_seconds: float = 0.0


def precision_dtype(precision: str) -> torch.dtype:
    if precision not in PRECISIONS:
        raise InvalidArgument(f"precision={precision!r}; pass one of {', '.join(PRECISIONS)}")
    return PRECISIONS[precision]


def lower_module(model: torch.nn.Module, example_inputs: tuple, *, batch: tuple[int, int, int] | None = None,
                 precision: str = "fp32", output_names: list[str] | None = None) -> Lowered:
    """Export ``model`` and lower all of it into a TensorRT network (raises on any unconverted op)."""
    program = export_program(model, example_inputs, batch)
    return lower_graph(program.graph_module.graph, program_constants(program),
                       precision=precision_dtype(precision), output_names=output_names,
                       name=type(model).__name__)


def convert_module(model: torch.nn.Module, example_inputs: tuple, *, batch: tuple[int, int, int] | None = None,
                   precision: str = "fp32", output_names: list[str] | None = None, build: bool = True,
                   optimization_level: int = 3) -> tuple[bytes | None, Conversion]:
    """Convert ``model`` straight to TensorRT: ``(serialized plan, Conversion)``; plan is None when
    ``build=False``. ``batch=(min, opt, max)`` makes dim 0 of every input dynamic.

    Example:
        >>> plan, conv = convert_module(model, (x,), batch=(1, 4, 16), precision="fp16")
    """
    lowered = lower_module(model, example_inputs, batch=batch, precision=precision, output_names=output_names)
    plan, seconds = None, 0.0
    if build:
        sizes = batch or (example_inputs[0].shape[0],) * 3
        result = build_plan(lowered.net, tuple(sizes), optimization_level)
        plan, seconds = result.plan, result.seconds
    record = lowered.net.record
    return plan, Conversion(
        record=record, input_names=tuple(n for n, _d, _s in record.inputs), output_names=tuple(record.outputs),
        converted=dict(lowered.converted), folded=tuple(lowered.folded), fp32_nodes=dict(lowered.fp32_nodes),
        converter_hash=source_hash(), build_seconds=seconds)
