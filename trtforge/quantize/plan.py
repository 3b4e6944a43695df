"""The frozen ``QuantPlan``: which layers run in INT8, with which scales. Computed once, applied by qdq.py.

Layers are addressed by their first output tensor's name, which the FP16 pass keeps, so the same
plan applies to the FP32 graph (ONNX Runtime simulation, FP32 scales) and to the FP16 graph
handed to TensorRT (FP16 scales). The scale dtype is the dtype of the tensor a scale quantizes
(opset ≥ 19 allows FP16 scales). Scales are stored already rounded to FP16, so both graphs
quantize on exactly the same grid.

Example:
    >>> plan.layers[0]
    QuantLayer(output='getitem_3', op_type='Conv', label='_blocks.0._depthwise_conv', ...)
    >>> apply_plan(fp16_model, plan, scale_dtype="float16")
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

#: Smallest scale kept (FP16 can represent it, ORT and TensorRT handle it).
MIN_SCALE = 2.0**-20


def fp16_scales(values) -> tuple[float, ...]:
    """Scales clamped to [MIN_SCALE, 65504] and rounded to FP16-representable floats."""
    arr = np.clip(np.asarray(values, dtype=np.float32), MIN_SCALE, 65504.0)
    return tuple(float(v) for v in arr.astype(np.float16).astype(np.float32))


@dataclass(frozen=True)
class QuantInput:
    """One quantized input of a layer: per-tensor (axis None) or per-channel scales."""

    index: int
    tensor: str
    scales: tuple[float, ...]
    axis: int | None = None
    is_weight: bool = False


@dataclass(frozen=True)
class QuantLayer:
    """A Conv/ConvTranspose/MatMul/Gemm layer that runs in INT8."""

    output: str
    op_type: str
    label: str
    inputs: tuple[QuantInput, ...]
    macs: int = 0


@dataclass(frozen=True)
class QuantPlan:
    """Everything the Q/DQ pass needs, and what the report says about it."""

    layers: tuple[QuantLayer, ...]
    excluded: tuple[tuple[str, str], ...] = ()  # (label, reason)
    calibrator: str = "entropy"
    total_macs: int = 0

    @property
    def int8_macs(self) -> int:
        return sum(layer.macs for layer in self.layers)

    @property
    def coverage(self) -> float:
        """Share of Conv/ConvTranspose/MatMul/Gemm multiply-accumulates that run in INT8."""
        return self.int8_macs / self.total_macs if self.total_macs else 0.0

    def only(self, outputs) -> QuantPlan:
        """A plan restricted to the layers whose outputs are in ``outputs`` (sensitivity runs)."""
        keep = set(outputs)
        return replace(self, layers=tuple(layer for layer in self.layers if layer.output in keep))

    def without(self, outputs, reason: str) -> QuantPlan:
        """A plan with the layers whose outputs are in ``outputs`` moved back to FP16."""
        drop = set(outputs)
        moved = tuple((layer.label, reason) for layer in self.layers if layer.output in drop)
        return replace(
            self, layers=tuple(layer for layer in self.layers if layer.output not in drop),
            excluded=self.excluded + moved,
        )

    def to_dict(self) -> dict:
        return {
            "calibrator": self.calibrator,
            "coverage": self.coverage,
            "layers": [
                {"output": layer.output, "op": layer.op_type, "label": layer.label, "macs": layer.macs,
                 "inputs": [{"index": q.index, "tensor": q.tensor, "axis": q.axis, "weight": q.is_weight,
                             "scales": list(q.scales) if q.axis is None or len(q.scales) <= 8 else len(q.scales)}
                            for q in layer.inputs]}
                for layer in self.layers
            ],
            "excluded": [list(e) for e in self.excluded],
        }
