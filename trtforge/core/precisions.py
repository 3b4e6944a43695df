"""Every precision trtforge builds, one record each: what it is, how it quantizes, how it is judged.

A ``Precision`` holds every fact about one precision that another module needs: its kind (a float type,
W8A8 quantization, weight-only quantization), the dtypes (the float type the graph computes in, the quantized
activation and weight types), the hardware scheme its quantized layers carry (``builder.capability``'s "runs
as" names), the op classes it quantizes, the placement rule set (``quantize.placement``), its label, the
tolerance ``trtforge check`` applies, the layer-wise divergence threshold, and the paths that build it.
Everything else reads these records by name (``record("int8-wo").scheme``); ``core.config``'s ``PRECISIONS``,
``FLOAT_PRECISIONS`` and the rest are derived here. A record is complete or it is refused when made: every
field is required and checked against its kind. docs/DEVELOPING.md, "Adding a precision", says where a new
one goes.

Example:
    >>> record("int4-wo").weight_dtype, record("int4-wo").scheme, record("int4-wo").block_size
    ('int4', 'int4_wo', 128)
    >>> [p.name for p in RECORDS if p.kind == WEIGHT_ONLY]
    ['int8-wo', 'int4-wo']
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from trtforge.core.errors import InternalError, InvalidArgument

#: The kinds of precision: the whole graph in one float type; W8A8 (quantized activations and weights,
#: calibration data needed); weight-only (quantized GEMM weights, activations in the float type, no data needed).
FLOAT, QUANTIZED, WEIGHT_ONLY = "float", "quantized", "weight-only"
KINDS: tuple[str, ...] = (FLOAT, QUANTIZED, WEIGHT_ONLY)
#: Float dtypes a graph may compute in (None: FP32, the graph as exported).
COMPUTE_DTYPES: tuple[str | None, ...] = (None, "float16", "bfloat16")
#: How a model becomes a TensorRT network: through ONNX and TensorRT's parser, or converted directly
#: from PyTorch (``trtforge.convert``, docs/direct-path.md).
PATHS: tuple[str, ...] = ("onnx", "direct")


@dataclass(frozen=True)
class Tolerance:
    """How far ``trtforge check`` lets a candidate's outputs stray from the FP32 reference, per metric
    (``debug.tolerances``; the metric names are ``core.budget.METRICS``')."""

    rel_l2: float
    top1_agreement: float
    cosine: float


@dataclass(frozen=True)
class Precision:
    """One precision, complete: every field is required (no defaults), and ``__post_init__`` refuses a field
    that contradicts the kind.

    ``compute_dtype``: the float type the graph computes in outside Q/DQ (None: FP32). ``activation_dtype`` and
    ``weight_dtype``: ``core.quant_plan.QUANT_DTYPES`` names (None: not quantized). ``block_size``: the default
    weight block along the reduction axis (None: one scale per output channel). ``scheme``: the hardware scheme
    (``builder.capability.RUNS_AS``; None for a float precision). ``op_classes``: the op classes it quantizes.
    ``placement``: the name of its default rule set in ``quantize.placement.RULE_SETS``. ``layer_threshold``: the
    per-tensor relative L2 that counts as diverged in a layer-wise comparison. ``paths``: the paths that build it.
    """

    name: str
    kind: str
    compute_dtype: str | None
    activation_dtype: str | None
    weight_dtype: str | None
    block_size: int | None
    scheme: str | None
    op_classes: tuple[str, ...]
    placement: str | None
    label: str
    tolerance: Tolerance
    layer_threshold: float
    paths: tuple[str, ...]

    def __post_init__(self) -> None:
        problem = _problem(self)
        if problem:
            raise InvalidArgument(f"precision record {self.name!r}: {problem}; give every field of "
                                  "trtforge.core.precisions.Precision (docs/DEVELOPING.md, 'Adding a precision')")

    @property
    def quantized(self) -> bool:
        """Whether ``trtforge.quantize`` plans it (W8A8 or weight-only)."""
        return self.kind != FLOAT

    @property
    def weight_only(self) -> bool:
        return self.kind == WEIGHT_ONLY


def _problem(p: Precision) -> str | None:
    """What makes ``p`` incomplete or self-contradictory, in words; None when it is whole."""
    checks = (
        (not p.name or p.name != p.name.lower(), "name: a lower-case name, e.g. 'int8'"),
        (p.kind not in KINDS, f"kind: one of {', '.join(KINDS)}"),
        (p.compute_dtype not in COMPUTE_DTYPES, f"compute_dtype: one of {COMPUTE_DTYPES}"),
        (not p.label, "label: how reports spell it, e.g. 'INT8'"),
        (not isinstance(p.tolerance, Tolerance), "tolerance: a Tolerance(rel_l2=, top1_agreement=, cosine=)"),
        (not 0 < p.layer_threshold < 1, "layer_threshold: a relative L2 between 0 and 1"),
        (not p.paths or not set(p.paths) <= set(PATHS), f"paths: some of {', '.join(PATHS)}"),
        (p.kind == FLOAT and any(v is not None for v in (p.activation_dtype, p.weight_dtype, p.block_size,
                                                          p.scheme, p.placement)),
         "a float precision quantizes nothing: activation_dtype, weight_dtype, block_size, scheme and placement "
         "are None"),
        (p.kind == FLOAT and p.op_classes != (), "op_classes: () for a float precision"),
        (p.kind != FLOAT and not (p.weight_dtype and p.scheme and p.op_classes and p.placement is not None),
         "a quantized precision names its weight_dtype, scheme, op_classes and placement rule set"),
        (p.kind != FLOAT and p.compute_dtype is None, "compute_dtype: the float type outside Q/DQ, e.g. 'float16'"),
        (p.kind == QUANTIZED and p.activation_dtype is None, "activation_dtype: W8A8 quantizes activations"),
        (p.kind == WEIGHT_ONLY and p.activation_dtype is not None, "activation_dtype: None for weight-only"),
    )
    return next((why for failed, why in checks if failed), None)


def _tol(rel_l2: float, top1_agreement: float, cosine: float) -> Tolerance:
    return Tolerance(rel_l2, top1_agreement, cosine)


#: Every precision, in the order the CLI lists them. FP32 allows TF32 (TensorRT's default for FP32 convolutions
#: and matrix products); FP16 and BF16 tolerances follow the float pass's measured error (docs/guide-precision.md,
#: "FP16 and BF16"); W8A8 INT8 the default placement's (top-1 agreement 0.936 on EfficientNet-Lite0), FP8 (E4M3:
#: 3 mantissa bits) as INT8; weight-only keeps FP16 activations, between FP16 and W8A8 (docs/quantization.md: cosine 0.999 at
#: int8-wo, 0.99 at int4-wo). Layer-wise: FP16 stays below 0.008 on every EfficientNet-Lite0 tensor; INT8 error
#: grows layer by layer to about 0.19 there, and 0.1 is where its linear-bottleneck projections stand out.
RECORDS: tuple[Precision, ...] = (
    Precision("fp32", FLOAT, None, None, None, None, None, (), None, "FP32",
              _tol(5e-3, 0.99, 0.9999), 1e-3, PATHS),
    Precision("fp16", FLOAT, "float16", None, None, None, None, (), None, "FP16",
              _tol(2e-2, 0.97, 0.999), 2e-2, PATHS),
    Precision("bf16", FLOAT, "bfloat16", None, None, None, None, (), None, "BF16",
              _tol(6e-2, 0.95, 0.995), 5e-2, PATHS),
    Precision("int8", QUANTIZED, "float16", "int8", "int8", None, "int8", ("conv", "gemm"), "w8a8", "INT8",
              _tol(0.25, 0.90, 0.98), 0.1, PATHS),
    Precision("fp8", QUANTIZED, "float16", "float8e4m3fn", "float8e4m3fn", None, "fp8", ("conv", "gemm"), "fp8",
              "FP8", _tol(0.25, 0.90, 0.98), 0.1, ("onnx",)),
    Precision("int8-wo", WEIGHT_ONLY, "float16", None, "int8", None, "int8_wo", ("gemm",), "weight-only",
              "INT8 weight-only", _tol(5e-2, 0.95, 0.995), 5e-2, ("onnx",)),
    Precision("int4-wo", WEIGHT_ONLY, "float16", None, "int4", 128, "int4_wo", ("gemm",), "weight-only",
              "INT4 weight-only", _tol(0.15, 0.90, 0.98), 0.1, ("onnx",)),
)
BY_NAME: dict[str, Precision] = {p.name: p for p in RECORDS}
if len(BY_NAME) != len(RECORDS):
    raise InternalError("core.precisions.RECORDS names a precision twice")
#: ``precision="auto"``'s ladder, cheapest rung first (one W8A8 type a graph): per layer the cheapest rung every
#: target accelerates, moved up the ladder, then to FP16, where the error budget needs it.
AUTO_LADDER: tuple[tuple[str, ...], ...] = (("fp8", "int8"), ("int8-wo",))
#: The fields every record must give (the architecture test checks each record against them).
FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Precision))


def record(name: str) -> Precision:
    """The record of precision ``name`` (lower case).

    Example:
        >>> record("fp16").compute_dtype
        'float16'
    """
    found = BY_NAME.get(name)
    if found is None:
        raise InvalidArgument(f"unknown precision {name!r}; choose one of {', '.join(BY_NAME)}")
    return found


def names(kind: str | None = None, path: str | None = None) -> tuple[str, ...]:
    """The precisions of ``kind`` (every kind when None) that ``path`` builds (every path when None), in order.

    Example:
        >>> names(WEIGHT_ONLY)
        ('int8-wo', 'int4-wo')
    """
    return tuple(p.name for p in RECORDS if kind in (None, p.kind) and path in (None, *p.paths))
