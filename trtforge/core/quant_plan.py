"""The quantization plan: which layers run quantized, in which dtype, with which scales (``QuantPlan``).

One plan type for every quantized precision (INT8, FP8, weight-only INT8/INT4) and both paths. It is
policy-free data, shared by the stages that make it and read it: ``trtforge.quantize`` computes it
(calibration, placement, sensitivity; on an ONNX graph or, for the direct path, on a PyTorch module),
``trtforge.passes.qdq`` writes it into an ONNX graph as Q/DQ nodes, and ``trtforge.convert`` emits the
same Q/DQ pairs into a TensorRT network. A layer is addressed by ``output`` (the ONNX path: its first
output tensor's name; the direct path: its module path) and named by ``label`` (the module path where
the export kept it). Scales are stored already rounded to FP16.

Example:
    >>> plan.layer("features.1.conv").weight.scales[:2]
    (0.0012, 0.0009)
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

import ml_dtypes
import numpy as np

#: Opset the Q/DQ graphs need (FP16 scales).
QDQ_OPSET = 19

#: Smallest scale kept (FP16 can represent it, ORT and TensorRT handle it).
MIN_SCALE = 2.0**-20
#: Opset that allows INT4 and ``block_size`` on DequantizeLinear.
BLOCKED_OPSET = 21


@dataclass(frozen=True)
class QuantDtype:
    """A quantized ONNX type: its numpy (ml_dtypes) type, the largest magnitude kept, and whether values round
    to integers (INT8/INT4) or to the nearest representable float (FP8)."""

    name: str
    numpy: type
    qmax: float
    integer: bool
    opset: int


#: The quantized dtypes a plan may use, by name (the names ONNX gives them, lower case).
QUANT_DTYPES: dict[str, QuantDtype] = {
    "int8": QuantDtype("int8", np.int8, 127.0, True, QDQ_OPSET),
    "float8e4m3fn": QuantDtype("float8e4m3fn", ml_dtypes.float8_e4m3fn, 448.0, False, QDQ_OPSET),
    "int4": QuantDtype("int4", ml_dtypes.int4, 7.0, True, BLOCKED_OPSET),
}


def fp16_scales(values) -> tuple[float, ...]:
    """Scales clamped to [MIN_SCALE, 65504] and rounded to FP16-representable floats."""
    arr = np.clip(np.asarray(values, dtype=np.float32), MIN_SCALE, 65504.0)
    return tuple(float(v) for v in arr.astype(np.float16).astype(np.float32))


@dataclass(frozen=True)
class QuantInput:
    """One quantized input of a layer: per-tensor (axis None), per-channel (``axis``) or blocked scales.

    Blocked (``block_size`` set): ``scales`` hold the scale tensor flattened, shaped ``scale_shape`` (the
    weight's shape with ``axis``, the blocked reduction axis, divided by ``block_size``).
    """

    index: int
    tensor: str
    scales: tuple[float, ...]
    axis: int | None = None
    is_weight: bool = False
    dtype: str = "int8"
    block_size: int | None = None
    scale_shape: tuple[int, ...] | None = None

    @property
    def qtype(self) -> QuantDtype:
        return QUANT_DTYPES[self.dtype]

    @property
    def opset(self) -> int:
        return max(self.qtype.opset, BLOCKED_OPSET if self.block_size else QDQ_OPSET)

    def scale_array(self, dtype=np.float32) -> np.ndarray:
        """The scales shaped as DequantizeLinear reads them (0-d, 1-D, or blocked)."""
        arr = np.asarray(self.scales, dtype=dtype)
        if self.block_size:
            return arr.reshape(self.scale_shape)
        return arr.reshape((len(self.scales),) if self.axis is not None else ())


@dataclass(frozen=True)
class QuantLayer:
    """A Conv/ConvTranspose/MatMul/Gemm layer that runs quantized (weight-only: its weight alone)."""

    output: str
    op_type: str
    label: str
    inputs: tuple[QuantInput, ...]
    macs: int = 0

    @property
    def activation(self) -> QuantInput | None:
        """The quantized activation input (the first one; None for a weight-only layer)."""
        return next((q for q in self.inputs if not q.is_weight), None)

    @property
    def weight(self) -> QuantInput | None:
        """The quantized weight input, or None (a product of two activations)."""
        return next((q for q in self.inputs if q.is_weight), None)


@dataclass(frozen=True)
class QuantPlan:
    """Everything the Q/DQ pass needs, and what the report says about it.

    ``precision`` is the build precision the plan is for (``int8``, ``fp8``, ``int8-wo``, ``int4-wo``);
    each input carries its own quantized dtype.
    """

    layers: tuple[QuantLayer, ...]
    excluded: tuple[tuple[str, str], ...] = ()  # (label, reason)
    calibrator: str = "entropy"
    total_macs: int = 0
    precision: str = "int8"

    @cached_property
    def _by_output(self) -> dict[str, QuantLayer]:
        return {layer.output: layer for layer in self.layers}

    def layer(self, output: str) -> QuantLayer | None:
        """The quantized layer addressed by ``output`` (the direct path: a module path), or None."""
        return self._by_output.get(output)

    @property
    def quantized_macs(self) -> int:
        return sum(layer.macs for layer in self.layers)

    @property
    def coverage(self) -> float:
        """Share of Conv/ConvTranspose/MatMul/Gemm multiply-accumulates that run quantized."""
        return self.quantized_macs / self.total_macs if self.total_macs else 0.0

    @property
    def opset(self) -> int:
        """The lowest opset that holds every Q/DQ node of the plan (19; 21 for INT4 or blocks)."""
        return max((q.opset for layer in self.layers for q in layer.inputs), default=QDQ_OPSET)

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

    def replaced(self, outputs, fallback: QuantPlan, reason: str) -> QuantPlan:
        """A plan with the layers whose outputs are in ``outputs`` as ``fallback`` quantizes them (a more
        accurate precision: ``precision="auto"``'s next rung), or moved back to FP16 where it has none."""
        swap = {layer.output: layer for layer in fallback.layers if layer.output in set(outputs)}
        out = self.without(set(outputs) - set(swap), reason)
        return replace(out, layers=tuple(swap.get(layer.output, layer) for layer in out.layers))

    def to_dict(self) -> dict:
        return {
            "precision": self.precision,
            "calibrator": self.calibrator,
            "coverage": self.coverage,
            "layers": [
                {"output": layer.output, "op": layer.op_type, "label": layer.label, "macs": layer.macs,
                 "inputs": [{"index": q.index, "tensor": q.tensor, "axis": q.axis, "weight": q.is_weight,
                             "dtype": q.dtype, "block_size": q.block_size,
                             "scales": list(q.scales) if q.axis is None or len(q.scales) <= 8 else len(q.scales)}
                            for q in layer.inputs]}
                for layer in self.layers
            ],
            "excluded": [list(e) for e in self.excluded],
        }
