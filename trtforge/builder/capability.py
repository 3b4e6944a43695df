"""Which precision each op class runs as, per TensorRT flavour, version and compute capability: data.

A quantized graph asks for a precision per layer (INT8 Q/DQ on activations and weights: W8A8; a
DequantizeLinear on the weight only: weight-only; FLOAT8E4M3FN Q/DQ: FP8). Whether the GPU runs
that layer in that precision is a fact of the hardware and the flavour, written down here once,
with its source. ``plan_layers`` checks every quantized layer against it for every target.

A cell has three states: ``accelerated`` (the layer runs in the precision it was quantized to),
``emulated`` (the engine builds, but the layer runs in the float type with its Q/DQ computed), or
``refused`` (the builder will not compile the datatype for that GPU). A probe build
(``builder.capability_probe``) can turn an ``accelerated`` or ``emulated`` cell into ``refused``:
a build tells more than the table, never less.

Example:
    >>> sorted(runs_as("tensorrt_rtx", "1.7.1", "sm86", "gemm"))
    ['bf16', 'fp16', 'fp32', 'int4_wo', 'int8_wo']
    >>> cell("tensorrt_rtx", "1.7.1", "sm86", "conv", "int8", "fp16")
    Cell(state='emulated', runs_as='fp16', why='...')
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from trtforge.core.gpu_targets import FULL_CCS, RTX_CCS, RTX_PORTABLE_TARGETS, cc_number  # noqa: F401  (re-exported)
from trtforge.core.precisions import RECORDS

#: What a layer runs as, hardware side (the config's precisions map onto these: ``SCHEME_OF_PRECISION``).
RUNS_AS: tuple[str, ...] = ("fp32", "fp16", "bf16", "int8", "int8_wo", "int4_wo", "fp8", "fp4")
#: How each reads in tables.
RUNS_AS_LABEL: dict[str, str] = {
    "fp32": "FP32", "fp16": "FP16", "bf16": "BF16", "int8": "INT8 (W8A8)", "int8_wo": "INT8 weight-only",
    "int4_wo": "INT4 weight-only", "fp8": "FP8", "fp4": "FP4",
}
#: The quantized schemes (every ``RUNS_AS`` entry that is not a float type).
QUANTIZED: tuple[str, ...] = ("int8", "int8_wo", "int4_wo", "fp8", "fp4")
#: Op classes: convolutions, matrix products, everything else.
OP_CLASSES: tuple[str, ...] = ("conv", "gemm", "other")
OP_CLASS_OF: dict[str, str] = {"Conv": "conv", "ConvTranspose": "conv", "Gemm": "gemm", "MatMul": "gemm"}
#: A config precision → the scheme its quantized layers carry (its record's ``scheme``; float precisions carry none).
SCHEME_OF_PRECISION: dict[str, str] = {p.name: p.scheme for p in RECORDS if p.scheme}
#: A scheme → the op classes a build with that precision quantizes (its record's ``op_classes``; weight-only: GEMM
#: weights). FP4 is no precision trtforge builds: a foreign graph may carry it.
CLASSES_OF_SCHEME: dict[str, tuple[str, ...]] = {**{p.scheme: p.op_classes for p in RECORDS if p.scheme},
                                                 "fp4": ("gemm",)}
FLAVOUR_LABEL: dict[str, str] = {"tensorrt": "full TensorRT", "tensorrt_rtx": "TensorRT-RTX"}

#: Compute capabilities each flavour runs engines on, and where a TensorRT-RTX engine built without targets runs:
#: ``core.gpu_targets`` (the one table of GPU targets; ``RTX_CCS``, ``FULL_CCS``, ``RTX_PORTABLE_TARGETS``).


def _from(cc: int, ccs: Sequence[str]) -> tuple[str, ...]:
    return tuple(t for t in ccs if cc_number(t) >= cc)


def _version(text: str | None) -> tuple[int, ...]:
    """``"1.7.1.116"`` → (1, 7, 1, 116); unknown parts stop the tuple."""
    parts = []
    for piece in str(text or "0").split("."):
        if not piece.isdigit():
            break
        parts.append(int(piece))
    return tuple(parts) or (0,)


@dataclass(frozen=True)
class Row:
    """Op classes ``classes`` run as ``precisions`` on ``ccs`` with ``flavour`` from ``since`` (up to,
    not including, ``until``). Rows add up: a cell's precisions are the union of the matching rows'."""

    flavour: str
    since: str
    until: str | None
    ccs: tuple[str, ...]
    classes: tuple[str, ...]
    precisions: tuple[str, ...]
    source: str

    def matches(self, flavour: str, version: str, cc: str, op_class: str) -> bool:
        v = _version(version)
        return (self.flavour == flavour and cc in self.ccs and op_class in self.classes and v >= _version(self.since)
                and (self.until is None or v < _version(self.until)))


_RTX_MATRIX = "TensorRT-RTX support matrix 1.0-1.5 and latest, 'Hardware and Precision' table"
_RTX_QTYPES = "TensorRT-RTX 'Working with Quantized Types': FP8 and FP4 only for matrix multiplications (GEMM)"
_RTX_17 = "TensorRT-RTX 1.7 release notes: 'FP8 and INT8 weight-only-quantized convolutions'"
_TRT_MATRIX = "TensorRT 10.x support matrix, 'Hardware and Precision' (INT8 and INT8 Tensor Cores on every GPU)"
_TRT_QTYPES = "TensorRT 10 'Working with Quantized Types': explicit INT8/FP8 Q/DQ; weight-only INT4/INT8 for GEMM"
_TRT_108 = "TensorRT 10.8 release notes: E2M1 FP4 on Blackwell by explicit quantization"
ALL_CLASSES = OP_CLASSES

#: The capability table. Conservative: a cell the sources do not name is not accelerated.
TABLE: tuple[Row, ...] = (
    # TensorRT-RTX. Its matrix has no W8A8 INT8 column: INT8 and INT4 only as weight-only GEMM, on 8.6+.
    # sm80 is offered by the 1.7 bindings but absent from the matrix: FP32/FP16 only.
    Row("tensorrt_rtx", "1.0", None, RTX_CCS, ALL_CLASSES, ("fp32", "fp16"), _RTX_MATRIX),
    Row("tensorrt_rtx", "1.0", None, _from(86, RTX_CCS), ALL_CLASSES, ("bf16",), _RTX_MATRIX),
    Row("tensorrt_rtx", "1.0", None, _from(86, RTX_CCS), ("gemm",), ("int8_wo", "int4_wo"),
        _RTX_MATRIX),
    Row("tensorrt_rtx", "1.0", None, _from(89, RTX_CCS), ("gemm",), ("fp8",), f"{_RTX_MATRIX}; {_RTX_QTYPES}"),
    Row("tensorrt_rtx", "1.0", None, _from(120, RTX_CCS), ("gemm",), ("fp4",), f"{_RTX_MATRIX}; {_RTX_QTYPES}"),
    Row("tensorrt_rtx", "1.7", None, _from(86, RTX_CCS), ("conv",), ("int8_wo",), _RTX_17),
    Row("tensorrt_rtx", "1.7", None, _from(89, RTX_CCS), ("conv",), ("fp8",), _RTX_17),
    # Full TensorRT 10 and 11: W8A8 INT8 convolutions and GEMMs everywhere, FP8 from Ada, FP4 on Blackwell.
    Row("tensorrt", "10.0", None, FULL_CCS, ALL_CLASSES, ("fp32", "fp16"), _TRT_MATRIX),
    Row("tensorrt", "10.0", None, _from(80, FULL_CCS), ALL_CLASSES, ("bf16",), _TRT_MATRIX),
    Row("tensorrt", "10.0", None, FULL_CCS, ("conv", "gemm"), ("int8",), f"{_TRT_MATRIX}; {_TRT_QTYPES}"),
    Row("tensorrt", "10.0", None, FULL_CCS, ("gemm",), ("int8_wo", "int4_wo"), _TRT_QTYPES),
    Row("tensorrt", "10.0", None, _from(89, FULL_CCS), ("conv", "gemm"), ("fp8",), f"{_TRT_MATRIX}; {_TRT_QTYPES}"),
    Row("tensorrt", "10.8", None, _from(100, FULL_CCS), ("gemm",), ("fp4",), _TRT_108),
)

#: Datatypes the builder refuses to compile for a GPU that lacks them (state ``refused``, not ``emulated``).
#: Source: TensorRT-RTX 1.7 here, FP8 MatMul built for sm86: "Cannot compile for target(s) sm86, because
#: the model contains HW-specific datatypes: fp8_e4m3". FP4 is a HW-specific datatype the same way.
HW_SPECIFIC: dict[str, tuple[str, ...]] = {"tensorrt_rtx": ("fp8", "fp4"), "tensorrt": ("fp8", "fp4")}


def runs_as(flavour: str, version: str, cc: str, op_class: str) -> frozenset[str]:
    """The precisions ``op_class`` runs as on ``cc`` with ``flavour`` ``version``, by the table alone."""
    return frozenset(p for row in TABLE if row.matches(flavour, version, cc, op_class) for p in row.precisions)


def sources(flavour: str, version: str, cc: str, op_class: str, precision: str) -> tuple[str, ...]:
    """The sources of the rows that give ``op_class`` ``precision`` on ``cc`` (empty: none does)."""
    return tuple(dict.fromkeys(r.source for r in TABLE if r.matches(flavour, version, cc, op_class)
                               and precision in r.precisions))


def known_ccs(flavour: str) -> tuple[str, ...]:
    return RTX_CCS if flavour == "tensorrt_rtx" else FULL_CCS


def default_targets(flavour: str, offered: Sequence[str] = (), local: Sequence[str] = ()) -> tuple[str, ...]:
    """The GPUs a build without ``targets`` is for: TensorRT-RTX's portable set (those its bindings
    offer), or, for full TensorRT, the local GPUs (its engines run on the GPU model they were built on).

    Example:
        >>> default_targets("tensorrt_rtx", offered=("sm75", "sm86", "sm89", "sm120"))
        ('sm86', 'sm89', 'sm120')
    """
    if flavour == "tensorrt_rtx":
        return tuple(t for t in RTX_PORTABLE_TARGETS if not offered or t in offered)
    return tuple(dict.fromkeys(local))


@dataclass(frozen=True)
class Cell:
    """What one quantized layer does on one target: ``state`` (accelerated | emulated | refused), the
    precision it runs as, and why."""

    state: str
    runs_as: str
    why: str = ""


#: A probe: (op class, scheme, target) → None when that builds, else the builder's one-line reason.
Probe = Callable[[str, str, str], "str | None"]


def cell(flavour: str, version: str, cc: str, op_class: str, scheme: str, float_precision: str,
         probe: Probe | None = None) -> Cell:
    """How a layer of ``op_class`` quantized as ``scheme`` runs on ``cc``; ``float_precision`` is what an
    unaccelerated layer computes in. ``probe`` (optional) is asked about the cells the table accelerates,
    and may refuse them (only a build tells; emulated cells are not probed: they cost builds and gain nothing).

    Example:
        >>> cell("tensorrt_rtx", "1.7", "sm86", "gemm", "fp8", "fp16").state
        'refused'
    """
    label = FLAVOUR_LABEL.get(flavour, flavour)
    if cc not in known_ccs(flavour):
        return Cell("refused", "-", f"{label} does not run on {cc}")
    if scheme in runs_as(flavour, version, cc, op_class):  # a probe build may refuse what the table allows
        reason = probe(op_class, scheme, cc) if probe is not None else None
        if reason is not None:
            return Cell("refused", "-", f"the {label} {version} build refuses it: {reason}")
        return Cell("accelerated", scheme, "; ".join(sources(flavour, version, cc, op_class, scheme)))
    if scheme in HW_SPECIFIC.get(flavour, ()):
        return Cell("refused", "-", f"{label} cannot compile {RUNS_AS_LABEL[scheme]} for {cc} (a HW-specific datatype)")
    return Cell("emulated", float_precision,
                f"{label} {version} has no {RUNS_AS_LABEL[scheme]} {op_class} kernels on {cc}")


def accelerated_classes(scheme: str, flavour: str, version: str, targets: Sequence[str]) -> tuple[str, ...]:
    """The op classes that every target runs accelerated in ``scheme`` (what a quantizer may quantize
    for those targets; ``precision="auto"`` picks among these).

    Example:
        >>> accelerated_classes("fp8", "tensorrt_rtx", "1.6", ("sm89", "sm120"))
        ('gemm',)
    """
    return tuple(c for c in OP_CLASSES if targets and all(scheme in runs_as(flavour, version, t, c) for t in targets))


@dataclass(frozen=True)
class QuantizedLayer:
    """One quantized layer of a graph: its node, op type and the scheme its Q/DQ carries."""

    name: str
    op_type: str
    scheme: str

    @property
    def op_class(self) -> str:
        return OP_CLASS_OF.get(self.op_type, "other")


@dataclass(frozen=True)
class LayerPlan:
    """One layer's cells, one per target (in the plan's target order)."""

    layer: QuantizedLayer
    cells: tuple[Cell, ...]

    @property
    def accelerated_somewhere(self) -> bool:
        return any(c.state == "accelerated" for c in self.cells)

    @property
    def refused(self) -> bool:
        return any(c.state == "refused" for c in self.cells)


@dataclass(frozen=True)
class TargetPlan:
    """Every quantized layer planned on every target: what it runs as, and whether the build may go on."""

    flavour: str
    version: str
    targets: tuple[str, ...]
    float_precision: str
    layers: tuple[LayerPlan, ...] = field(default_factory=tuple)

    @property
    def unaccelerated(self) -> tuple[LayerPlan, ...]:
        """Layers no target runs in their quantized precision (and none refuses them)."""
        return tuple(p for p in self.layers if not p.accelerated_somewhere and not p.refused)

    @property
    def refused(self) -> tuple[LayerPlan, ...]:
        return tuple(p for p in self.layers if p.refused)

    def refusal(self, allow_unaccelerated: bool = False) -> str | None:
        """The one line that refuses this plan, or None when the build may go on."""
        if self.refused:
            return refused_line(self, self.refused)
        if self.unaccelerated and not allow_unaccelerated:
            return unaccelerated_line(self, self.unaccelerated)
        return None

    def record(self, allow_unaccelerated: bool = False) -> dict:
        """The sidecar's ``target_plan`` block (JSON)."""
        return {
            "flavour": self.flavour, "version": self.version, "targets": list(self.targets),
            "float_precision": self.float_precision, "allow_unaccelerated": allow_unaccelerated,
            "layers": [{"layer": p.layer.name, "op": p.layer.op_type, "class": p.layer.op_class,
                        "quantized_as": p.layer.scheme,
                        "runs_as": {t: c.runs_as for t, c in zip(self.targets, p.cells, strict=True)}}
                       for p in self.layers],
            "unaccelerated": [p.layer.name for p in self.unaccelerated],
        }


def plan_layers(layers: Iterable[QuantizedLayer], flavour: str, version: str, targets: Sequence[str],
                float_precision: str, probe: Probe | None = None) -> TargetPlan:
    """Every layer against the table (and ``probe``) for every target.

    Example:
        >>> plan = plan_layers([QuantizedLayer("conv1", "Conv", "int8")], "tensorrt_rtx", "1.7", ("sm86", "sm89"), "fp16")
        >>> plan.refusal()
        'TensorRT-RTX runs INT8 only as weight-only GEMM: ...'
    """
    targets = tuple(targets)
    memo: dict[tuple[str, str, str], Cell] = {}

    def one(layer: QuantizedLayer, target: str) -> Cell:
        key = (layer.op_class, layer.scheme, target)
        if key not in memo:
            memo[key] = cell(flavour, version, target, layer.op_class, layer.scheme, float_precision, probe)
        return memo[key]

    plans = tuple(LayerPlan(layer, tuple(one(layer, t) for t in targets)) for layer in layers)
    return TargetPlan(flavour, version, targets, float_precision, plans)


def plan_precision(precision: str, flavour: str, version: str, targets: Sequence[str], float_precision: str,
                   probe: Probe | None = None) -> TargetPlan:
    """Before any graph exists: one stand-in layer per op class ``precision`` quantizes. Refused when no
    class it quantizes runs accelerated on any target, or when a target cannot build the datatype.

    Example:
        >>> plan_precision("int8", "tensorrt_rtx", "1.7", ("sm86", "sm89", "sm120"), "fp16").refusal()
        'TensorRT-RTX runs INT8 only as weight-only GEMM: ...'
    """
    scheme = SCHEME_OF_PRECISION.get(precision)
    if scheme is None:
        return TargetPlan(flavour, version, tuple(targets), float_precision)
    stand_ins = [QuantizedLayer(f"{STAND_IN}{c}", next(op for op, k in OP_CLASS_OF.items() if k == c), scheme)
                 for c in CLASSES_OF_SCHEME[scheme]]
    plan = plan_layers(stand_ins, flavour, version, targets, float_precision, probe)
    if any(p.accelerated_somewhere for p in plan.layers):  # the quantizer keeps the other classes in float
        return TargetPlan(flavour, version, plan.targets, float_precision, plan.refused)
    return plan


# -- the one-line refusals --------------------------------------------------------------------------
#: (flavour, scheme) → what that flavour does with the scheme, and what to use instead (CLI words).
ADVICE: dict[tuple[str, str], tuple[str, str]] = {
    ("tensorrt_rtx", "int8"): ("TensorRT-RTX runs INT8 only as weight-only GEMM",
                               "use --precision int8-wo, --precision fp8 --target sm89,sm120, or full TensorRT "
                               "for W8A8"),
    ("tensorrt_rtx", "fp8"): ("TensorRT-RTX runs FP8 only on sm89 and sm120/sm121 (GEMM; convolutions from 1.7)",
                              "use --target sm89,sm120 (targets=['sm89', 'sm120']), or --precision int8-wo for sm86"),
    ("tensorrt_rtx", "fp4"): ("TensorRT-RTX runs FP4 only as GEMM on sm120/sm121",
                              "use --target sm120, or --precision fp8 / int8-wo"),
    ("tensorrt_rtx", "int4_wo"): ("TensorRT-RTX runs INT4 only as weight-only GEMM on sm86 and newer",
                                  "use --target sm86,sm89,sm120, or keep convolutions in fp16"),
    ("tensorrt_rtx", "int8_wo"): ("TensorRT-RTX runs INT8 weight-only on GEMMs (convolutions from 1.7), sm86 and "
                                  "newer", "use --target sm86,sm89,sm120, or keep those layers in fp16"),
    ("tensorrt", "fp8"): ("full TensorRT runs FP8 only on sm89 and newer (Ada, Hopper, Blackwell)",
                          "build for those GPUs, or use --precision int8 for older ones"),
    ("tensorrt", "fp4"): ("full TensorRT runs FP4 only as GEMM on Blackwell (sm100+) from 10.8",
                          "use --precision fp8 or int8"),
}


#: The name of ``plan_precision``'s stand-in layers (one per op class, before a graph exists).
STAND_IN = "*"
CLASS_WORDS: dict[str, str] = {"conv": "convolutions", "gemm": "GEMMs", "other": "other layers"}


def _summary(plans: Sequence[LayerPlan]) -> str:
    scheme = RUNS_AS_LABEL[plans[0].layer.scheme]
    if all(p.layer.name.startswith(STAND_IN) for p in plans):
        return f"{scheme} " + " and ".join(CLASS_WORDS[p.layer.op_class] for p in plans)
    ops: dict[str, int] = {}
    for p in plans:
        ops[p.layer.op_type] = ops.get(p.layer.op_type, 0) + 1
    return f"{len(plans)} {scheme} layer(s) ({', '.join(f'{op} {n}' for op, n in sorted(ops.items()))})"


def _advice(plan: TargetPlan, scheme: str) -> tuple[str, str]:
    label = FLAVOUR_LABEL.get(plan.flavour, plan.flavour)
    return ADVICE.get((plan.flavour, scheme), (f"{label} {plan.version} does not accelerate {RUNS_AS_LABEL[scheme]} "
                                               f"here", "use another --precision or --target"))


def unaccelerated_line(plan: TargetPlan, plans: Sequence[LayerPlan]) -> str:
    """"TensorRT-RTX runs INT8 only as weight-only GEMM: N INT8 (W8A8) layer(s) (...) would run as fp16 on
    sm86 (...), ...; use ...; --allow-unaccelerated builds it anyway"."""
    first = plans[0]
    lead, fix = _advice(plan, first.layer.scheme)
    groups: dict[str, list[str]] = {}
    for target, c in zip(plan.targets, first.cells, strict=True):
        groups.setdefault(c.runs_as, []).append(target)
    where = "; ".join(f"{runs} on {', '.join(targets)}" for runs, targets in groups.items())
    return (f"{lead}: {_summary(plans)} would run as {where} (no target accelerates them); {fix}; "
            "--allow-unaccelerated (allow_unaccelerated=True) builds it anyway")


def refused_line(plan: TargetPlan, plans: Sequence[LayerPlan]) -> str:
    """One line: which targets refuse which layers, and what to use instead."""
    first = plans[0]
    lead, fix = _advice(plan, first.layer.scheme)
    bad = [(t, c) for t, c in zip(plan.targets, first.cells, strict=True) if c.state == "refused"]
    why = "; ".join(f"{t}: {c.why}" for t, c in bad[:2])
    return f"{lead}: {_summary(plans)} cannot be built for {', '.join(t for t, _ in bad)} ({why}); {fix}"


# -- the docs' "which precision for which GPU" table (docs/quantization.md; a test keeps it generated) ----
#: (flavour, version the table is read at, the GPUs listed, with example devices).
DOC_ROWS: tuple[tuple[str, str, tuple[tuple[str, str], ...]], ...] = (
    ("tensorrt_rtx", "1.7", (("sm75", "RTX 2080 Ti"), ("sm86", "RTX 3090, A6000"), ("sm89", "RTX 4090, RTX 6000 Ada"),
                             ("sm120", "RTX 5090, RTX PRO 6000"), ("sm121", "GB10"))),
    ("tensorrt", "10.8", (("sm75", "T4"), ("sm80", "A100"), ("sm86", "A10, RTX 3090"), ("sm89", "L4, L40S"),
                          ("sm90", "H100, H200"), ("sm100", "B200"), ("sm120", "RTX 5090"))),
)
DOC_BEGIN = "<!-- capability table: generated by `python -m trtforge.builder.capability`; do not edit -->"
DOC_END = "<!-- end of capability table -->"


def _quantized_words(flavour: str, version: str, cc: str, op_class: str) -> str:
    have = runs_as(flavour, version, cc, op_class)
    return ", ".join(RUNS_AS_LABEL[s] for s in QUANTIZED if s in have) or "none"


def _use(flavour: str, version: str, cc: str, quote: str = "`") -> str:
    """The config precisions that some op class runs accelerated there (what ``--precision`` to try)."""
    uses = []
    for precision, scheme in SCHEME_OF_PRECISION.items():
        classes = [c for c in CLASSES_OF_SCHEME[scheme] if scheme in runs_as(flavour, version, cc, c)]
        if classes:
            scope = "" if classes == list(CLASSES_OF_SCHEME[scheme]) else f" ({'/'.join(CLASS_WORDS[c] for c in classes)})"
            uses.append(f"{quote}{precision}{quote}{scope}")
    return ", ".join(uses) or f"{quote}fp16{quote}"


def capability_words(flavour: str, version: str, cc: str) -> str:
    """One GPU's row in words: what convolutions and GEMMs run as, and which ``--precision`` pays off.

    Example:
        >>> capability_words("tensorrt_rtx", "1.7", "sm86")
        'convolutions FP16/BF16; INT8 weight-only | GEMM FP16/BF16; INT8 weight-only, INT4 weight-only | ...'
    """
    if not runs_as(flavour, version, cc, "gemm"):
        return f"{FLAVOUR_LABEL[flavour]} does not run on {cc}"
    floats = "/".join(RUNS_AS_LABEL[p] for p in ("fp16", "bf16") if p in runs_as(flavour, version, cc, "gemm"))
    return (f"convolutions {floats}; {_quantized_words(flavour, version, cc, 'conv')} | GEMM {floats}; "
            f"{_quantized_words(flavour, version, cc, 'gemm')} | --precision {_use(flavour, version, cc, quote='')}")


def markdown() -> str:
    """The "which precision for which GPU" table, as docs/quantization.md shows it (between the markers)."""
    lines = [DOC_BEGIN, "", "| flavour | GPU | convolutions run as | GEMM / MatMul run as | `--precision` that pays off |",
             "|---|---|---|---|---|"]
    for flavour, version, gpus in DOC_ROWS:
        for cc, devices in gpus:
            floats = "/".join(RUNS_AS_LABEL[p] for p in ("fp16", "bf16") if p in runs_as(flavour, version, cc, "gemm"))
            lines.append(f"| {FLAVOUR_LABEL[flavour]} {version}+ | {cc} ({devices}) | "
                         f"{floats}; {_quantized_words(flavour, version, cc, 'conv')} | "
                         f"{floats}; {_quantized_words(flavour, version, cc, 'gemm')} | {_use(flavour, version, cc)} |")
    lines += ["", DOC_END]
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown())
