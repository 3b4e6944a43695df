"""What each quantized precision means to the quantizer, as data: its dtypes, placement rules and weight grid.

``int8`` (W8A8) and ``fp8`` (E4M3) quantize activations (per tensor) and weights (per output channel) of
Conv/ConvTranspose/MatMul/Gemm. ``int8-wo`` and ``int4-wo`` quantize only GEMM weights (MatMul/Gemm with
a constant B): a DequantizeLinear-only initializer, per output channel or in blocks along the reduction
axis (INT4: blocks of ``block_size``, 128 by default, opset 21); activations stay FP16. The rest of the
quantizer (calibration, SmoothQuant, bias correction, placement, sensitivity, the report) is the same for
every precision and reads only this record.

Example:
    >>> spec = spec_of("int4-wo", QuantConfig())
    >>> spec.weight_dtype, spec.block_size, spec.weight_only
    ('int4', 128, True)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from trtforge.core.config import (
    WEIGHT_ONLY_PRECISIONS,
    ConfigError,
    QuantConfig,
    option_spelling,
)
from trtforge.core.errors import InvalidArgument, spelled
from trtforge.core.precisions import RECORDS, record
from trtforge.passes.qdq import QUANT_DTYPES, QuantDtype, QuantInput, QuantLayer, fp16_scales
from trtforge.quantize.calibrators import block_scales, weight_scales
from trtforge.quantize.placement import RULE_SETS, Analysis, Candidate, weight_only_analysis

#: The smallest block along the reduction axis (TensorRT's INT4 kernels want at least 16 weights a block).
MIN_BLOCK = 16


@dataclass(frozen=True)
class PrecisionSpec:
    """One quantized precision: the activation dtype (None: weight-only), the weight dtype, the default
    placement rules, and the weight block size along the reduction axis (None: one scale per channel)."""

    precision: str
    activation_dtype: str | None
    weight_dtype: str
    rules: tuple[tuple[str, Callable[[Candidate], str | None]], ...]
    block_size: int | None = None

    @property
    def weight_only(self) -> bool:
        return self.activation_dtype is None

    @property
    def activation_qtype(self) -> QuantDtype | None:
        return None if self.activation_dtype is None else QUANT_DTYPES[self.activation_dtype]

    @property
    def weight_qtype(self) -> QuantDtype:
        return QUANT_DTYPES[self.weight_dtype]

    @property
    def opset(self) -> int:
        """The opset its Q/DQ nodes need: 19, or 21 for INT4 or blocked weights."""
        blocked = QUANT_DTYPES["int4"].opset
        return blocked if self.block_size or self.weight_dtype == "int4" else self.weight_qtype.opset

    @property
    def name(self) -> str:
        """How reports and tables spell it (its record's label): INT8, FP8, INT8 weight-only, INT4 weight-only."""
        return record(self.precision).label

    def candidates(self, analysis: Analysis) -> Analysis:
        """The part of ``analysis`` this precision can quantize (weight-only: GEMM weights)."""
        return weight_only_analysis(analysis) if self.weight_only else analysis

    def weight_input(self, ref: tuple[int, str, int | None], weight: np.ndarray) -> QuantInput | str:
        """The quantized input for ``weight`` (``ref``: a candidate's (input index, name, output-channel axis)),
        or the reason it cannot take this precision."""
        idx, name, axis = ref
        qtype = self.weight_qtype
        if not self.weight_only or self.block_size is None:
            scales = weight_scales(weight, axis, qtype.qmax)
            return QuantInput(idx, name, fp16_scales(scales), axis, True, self.weight_dtype)
        if weight.ndim != 2:
            return f"weight of rank {weight.ndim}: weight-only blocks need a 2-D GEMM weight"
        reduction = 1 - axis
        k = int(weight.shape[reduction])
        block = self.block_size or 128
        while block >= MIN_BLOCK and k % block:
            block //= 2
        if block < MIN_BLOCK:
            return f"reduction dimension {k} is not a multiple of {MIN_BLOCK} (weight-only blocks)"
        scales = block_scales(weight, reduction, block, qtype.qmax)
        return QuantInput(idx, name, fp16_scales(scales.ravel()), reduction, True, self.weight_dtype, block,
                          tuple(int(d) for d in scales.shape))


#: Every quantized precision (``core.precisions.RECORDS``, in its order) → its spec.
SPECS: dict[str, PrecisionSpec] = {p.name: PrecisionSpec(p.name, p.activation_dtype, p.weight_dtype,
                                                         RULE_SETS[p.placement], p.block_size)
                                   for p in RECORDS if p.quantized}


def spec_of(precision: str, config: QuantConfig | None = None) -> PrecisionSpec:
    """The spec of ``precision``, with ``config.block_size`` (weight-only) applied.

    Example:
        >>> spec_of("int8-wo", QuantConfig(block_size=64)).block_size
        64
    """
    if precision not in SPECS:
        raise InvalidArgument(f"precision={precision!r} is not quantized; choose one of {', '.join(SPECS)}")
    spec = SPECS[precision]
    block = None if config is None else config.block_size
    if block is not None and spec.weight_only:
        spec = replace(spec, block_size=block)
    return spec


#: The fix of a graph with nothing to quantize, in Python terms (the CLI's is ``--precision fp16``).
FP16_FIX = "precision='fp16'"


def require_candidates(spec: PrecisionSpec, analysis: Analysis) -> Analysis:
    """``spec``'s candidates in ``analysis``; a graph in which it finds nothing to quantize is refused in one line
    naming the fix (before any calibration: ``build``, ``compile`` and ``quantize sensitivity`` alike)."""
    candidates = spec.candidates(analysis)
    if candidates.candidates:
        return candidates
    what = ("MatMul or Gemm layer with a constant 2-D weight (weight-only quantizes GEMM weights)" if spec.weight_only
            else "Conv, ConvTranspose, MatMul or Gemm layer with float inputs")
    raise InvalidArgument(f"the graph has no {what} to quantize; build it with "
                          f"{spelled(cli='--precision fp16', python=FP16_FIX)} instead")


def precision_of(layer: QuantLayer) -> str:
    """The quantized precision ``layer`` runs in, read from its inputs (a ``precision="auto"`` plan mixes them).

    Example:
        >>> precision_of(plan.layers[0])
        'int8-wo'
    """
    weight = next((q for q in layer.inputs if q.is_weight), layer.inputs[0])
    weight_only = all(q.is_weight for q in layer.inputs)
    return next(s.precision for s in SPECS.values() if s.weight_dtype == weight.dtype and s.weight_only == weight_only)


def check_without_data(quant: QuantConfig | None, precision: str, strict_accuracy: bool = False) -> None:
    """A quantized build given no calibration data: a weight-only precision (its scales come from the weights
    alone), and no option that measures on data; else one line, before any work.

    Example: ``check_without_data(QuantConfig(), "int4-wo")`` passes; ``"int8"`` or ``QuantConfig(awq=True)`` raises.
    """
    data = spelled(cli="--calib DATA", python="calibration_data=")
    if precision not in WEIGHT_ONLY_PRECISIONS:
        raise ConfigError(spelled(
            cli=f"--precision {precision} needs --calib DATA (an image folder or a .npy/.npz file): its activation "
                "scales come from data; only int8-wo/int4-wo build without it. See docs/quantization.md",
            python=f"precision={precision!r} needs calibration_data= (an image folder, a .npy file, an array or torch "
                   "tensor, a dict or tuple of per-input arrays, an iterable of those, or a callable): its activation "
                   "scales come from data; only 'int8-wo'/'int4-wo' build without it. See docs/quantization.md"))
    quant = quant or QuantConfig()
    needs = [option_spelling(name, value, QuantConfig, python=f"{name}={shown}") for name, value, shown, used in (
        ("awq", "", "True", quant.awq),
        ("rounding", quant.rounding, repr(quant.rounding), quant.rounding != "nearest"),
        ("placement", "auto", "'auto'", quant.placement == "auto"),
        ("error_budget", str(quant.error_budget), repr(quant.error_budget), quant.error_budget is not None),
    ) if used]
    if strict_accuracy:
        needs.append(option_spelling("strict_accuracy", "", python="strict_accuracy=True"))
    if needs:
        raise ConfigError(f"{', '.join(needs)} measure(s) on calibration data, and this {precision} build has none "
                          f"(its weight scales come from the weights alone): add {data}, or drop {', '.join(needs)}")
