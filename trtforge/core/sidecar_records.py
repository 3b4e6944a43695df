"""The sidecar's typed sub-records (source, engine, precision, builder, quantization, target plan,
shape inputs, graph edits): frozen dataclasses that read their JSON keys and keep unknown ones in ``extra``.

They live beside :mod:`trtforge.core.sidecar`, which re-exports them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from trtforge.core.errors import WrongType

#: Field metadata: an optional key, written only when it holds a value (older sidecars lack it).
OPTIONAL_FIELD = {"optional": True}


def optional_field(default: Any = None) -> Any:
    return field(default=default, metadata=OPTIONAL_FIELD)


def to_json(value: Any) -> Any:
    """Tuples back to JSON lists, recursively (records keep string lists as tuples); nested records as objects."""
    if isinstance(value, SidecarRecord):
        return value.to_dict()
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    if isinstance(value, Mapping):
        return {k: to_json(v) for k, v in value.items()}
    return value


def as_tuple(value: Any) -> tuple:
    return tuple(value) if isinstance(value, (list, tuple)) else (() if value is None else (value,))


@dataclass(frozen=True, kw_only=True)
class SidecarRecord:
    """Base of the sidecar's sub-records: typed fields, and ``extra`` for keys this version does not know.

    Example:
        >>> BuilderRecord.from_dict({"flavour": "tensorrt_rtx", "new_key": 1}).extra
        {'new_key': 1}
    """

    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | SidecarRecord | None) -> Any:
        """A record from its JSON object; missing keys get their defaults, unknown keys go to ``extra``."""
        if isinstance(data, cls):
            return data
        if data is None:
            data = {}
        if not isinstance(data, Mapping):
            raise WrongType(f"a sidecar {cls.__name__} is a JSON object, got {type(data).__name__}; "
                            "pass a dict or the record itself")
        names = {f.name for f in fields(cls)} - {"extra"}
        known = {k: v for k, v in data.items() if k in names}
        return cls(**known, extra={k: v for k, v in data.items() if k not in names})

    def __getitem__(self, key: str) -> Any:
        """A field (or an ``extra`` key) by its JSON name, as in the sidecar file: ``precision["built"]``.

        Example:
            >>> PrecisionRecord(built="fp16")["built"]
            'fp16'
        """
        names = {f.name for f in fields(self)} - {"extra"}
        if key in names:
            return getattr(self, key)
        if key in self.extra:
            return self.extra[key]
        raise KeyError(f"{type(self).__name__} has no key {key!r}; it has {', '.join(sorted(names | set(self.extra)))}")

    def to_dict(self) -> dict[str, Any]:
        """The JSON object: every field (optional ones only when set), then the unknown keys."""
        data: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "extra" or (value is None and f.metadata.get("optional")):
                continue
            data[f.name] = to_json(value)
        data.update(self.extra)
        return data


@dataclass(frozen=True, kw_only=True)
class SourceRecord(SidecarRecord):
    """Where the engine came from: the model or file, and the ONNX graphs written beside the engine."""

    kind: str | None = optional_field()  # "torch" or "onnx"
    original: str | None = optional_field()  # the ONNX file given
    module: str | None = optional_field()  # the nn.Module's class
    factory: str | None = optional_field()  # "package.module:function" that rebuilds the model (zoo models)
    onnx_file: str | None = optional_field()  # the processed graph the engine was built from
    onnx_sha256: str | None = optional_field()
    reference_onnx_file: str | None = optional_field()  # the FP32 graph before the precision passes
    reference_onnx_sha256: str | None = optional_field()
    #: "direct": converted from PyTorch without ONNX (trtforge.convert), so no .onnx lies beside the engine.
    path: str | None = optional_field()


@dataclass(frozen=True, kw_only=True)
class EngineRecord(SidecarRecord):
    """The engine file beside the sidecar: its name, size and sha256."""

    file: str
    size: int
    sha256: str


@dataclass(frozen=True, kw_only=True)
class PrecisionRecord(SidecarRecord):
    """The precision asked for, the one built, and the graph's node dtypes."""

    requested: str | None = optional_field()
    built: str | None = optional_field()  # differs from requested when INT8 placement kept every layer FP16
    node_dtypes: Mapping[str, int] = field(default_factory=dict)
    fp32_nodes: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class BuilderRecord(SidecarRecord):
    """How TensorRT built the engine: flavour, version, targets, portability and cache facts."""

    flavour: str | None = optional_field()  # "tensorrt" or "tensorrt_rtx"
    version: str | None = optional_field()
    targets: tuple[str, ...] = ()
    offered_targets: tuple[str, ...] = ()
    optimization_level: int | None = optional_field()
    workspace_bytes: int | None = optional_field()
    strongly_typed: bool | None = optional_field()
    hardware_compatibility: str | None = None
    version_compatible: bool = False
    host_code: bool = False
    refittable: bool = False
    weights_stripped: bool = False
    timing_cache: bool | None = optional_field()
    build_seconds: float | None = optional_field()
    created: str | None = optional_field()
    config: Mapping[str, Any] | None = optional_field()
    trtforge_version: str | None = optional_field()
    cache: Mapping[str, Any] | None = optional_field()  # {"key", "hit"}, or {"enabled": False}
    refit: Mapping[str, Any] | None = optional_field()  # the last refit: weights, sha256, count, time
    converter_hash: str | None = optional_field()  # the direct path: sha256 of the converters' source

    def __post_init__(self) -> None:
        object.__setattr__(self, "targets", as_tuple(self.targets))
        object.__setattr__(self, "offered_targets", as_tuple(self.offered_targets))


#: A report row's value (a layer's label, an error, a count, a flag, or a list of names).
RowValue = str | int | float | bool | tuple[str, ...] | None
Row = Mapping[str, RowValue]


class ReportEntry(Mapping):
    """A report entry that reads as the report's dict did: ``set(entry)``, ``entry.get(k)``, ``entry.items()``
    over its JSON keys (``to_dict``), besides its typed fields."""

    def __iter__(self):
        return iter(self.to_dict())

    def __len__(self) -> int:
        return len(self.to_dict())


def _records(value, cls) -> tuple:
    return tuple(cls.from_dict(v) for v in as_tuple(value))


@dataclass(frozen=True, kw_only=True)
class MethodRecord(SidecarRecord, ReportEntry):
    """A quantization method's entry (``trtforge.quantize.methods``): kept or not, the held-back relative L2 mean of
    the graph it started from and of its candidate; its own fields follow, in its order (in ``extra``: ``layers``
    is a count for most, each layer's record for learned rounding, the layers' names for equalization).

    Example:
        >>> MethodRecord.from_dict({"applied": True, "rel_l2_before": 0.02, "rel_l2_after": 0.01, "damp": 0.01})["damp"]
        0.01
    """

    applied: bool = False
    rel_l2_before: float | None = optional_field()
    rel_l2_after: float | None = optional_field()


@dataclass(frozen=True, kw_only=True)
class MethodRow(SidecarRecord, ReportEntry):
    """A row of the report's ``methods``: a method that ran, its time, and its candidate's held-back metrics."""

    method: str | None = optional_field()
    applied: bool | None = optional_field()
    seconds: float | None = optional_field()
    held_back: Mapping[str, float | int] | None = optional_field()


@dataclass(frozen=True, kw_only=True)
class SmoothQuantRecord(SidecarRecord, ReportEntry):
    """SmoothQuant: α, each LayerNorm smoothed (with its consumers) and each one skipped with its reason."""

    alpha: float | None = optional_field()
    sites: tuple[Row, ...] | None = optional_field()
    skipped: tuple[Row, ...] | None = optional_field()


@dataclass(frozen=True, kw_only=True)
class ErrorBudgetRecord(SidecarRecord, ReportEntry):
    """The error budget: where it came from, the task, whether it holds, and each limit with its measured value."""

    source: str | None = optional_field()  # "default" or "error_budget="
    task: str | None = optional_field()
    description: str | None = optional_field()
    holds: bool | None = optional_field()
    used_by_placement: bool | None = optional_field()
    limits: tuple[Row, ...] | None = optional_field()  # {"metric", "op", "limit", "measured", "holds"} each


@dataclass(frozen=True, kw_only=True)
class AutoPlacementRecord(SidecarRecord, ReportEntry):
    """``placement="auto"``: the budget as checked at placement, the samples and checks, the groups readmitted."""

    budget_at_placement: tuple[Row, ...] | None = optional_field()
    samples: int | None = optional_field()
    checks: int | None = optional_field()
    readmitted: tuple[str, ...] | None = optional_field()


@dataclass(frozen=True, kw_only=True)
class AutoPrecisionRecord(SidecarRecord, ReportEntry):
    """``precision="auto"``: the ladder per op type, the layers per precision, and each layer's choice."""

    ladder: Mapping[str, tuple[str, ...]] | None = optional_field()
    counts: Mapping[str, int] | None = optional_field()
    layers: tuple[Row, ...] | None = optional_field()


#: The quantization report's keys that hold a typed sub-record, and its class.
_SUB_RECORDS = {"awq": MethodRecord, "learned_rounding": MethodRecord, "gptq": MethodRecord,
                "equalization": MethodRecord, "finetune": MethodRecord, "smoothquant": SmoothQuantRecord,
                "auto_placement": AutoPlacementRecord, "auto_precision": AutoPrecisionRecord,
                "error_budget": ErrorBudgetRecord}


@dataclass(frozen=True, kw_only=True)
class QuantizationRecord(SidecarRecord):
    """The quantization report (INT8, FP8, weight-only): calibration, placement, the methods that ran, and the
    error measured on held-back samples."""

    calibrator: str | None = None
    percentile: float | None = None
    smoothquant_alpha: float | None = None
    bias_correction: bool | MethodRecord | None = None  # the option asked for; what it did once it ran
    placement: str | None = None
    task: str | None = None
    samples: Mapping[str, int] | None = None
    #: Weight-only without data: "none: ..." (scales from the weights alone, nothing measured); absent when data was given.
    calibration_data: str | None = optional_field()
    smoothquant: SmoothQuantRecord | None = optional_field()
    precision: str | None = optional_field()  # int8, fp8, int8-wo, int4-wo (absent in INT8-era sidecars)
    block_size: int | None = optional_field()  # weight-only: weights per scale along the reduction axis
    awq: MethodRecord | None = optional_field()  # weight-only AWQ-lite: applied, held-back error before/after
    rounding: str | None = optional_field()  # nearest | learned | gptq (absent in older sidecars)
    learned_rounding: MethodRecord | None = optional_field()  # applied, held-back error, per-layer MSE
    gptq: MethodRecord | None = optional_field()  # weight-only GPTQ: applied, held-back error before/after
    equalize: bool | None = optional_field()  # the option asked for (absent in older sidecars)
    #: Cross-layer equalization and bias absorption: applied, held-back error before/after, pairs, absorbed layers.
    equalization: MethodRecord | None = optional_field()
    finetune_seconds: float | None = optional_field()  # the option asked for (absent in older sidecars)
    #: Quantization-aware fine-tuning: applied, held-back error before/after, steps, loss, seconds.
    finetune: MethodRecord | None = optional_field()
    #: The methods that ran, in order: {"method", "applied", "seconds", "held_back": metrics after it} each.
    methods: tuple[MethodRow, ...] | None = optional_field()
    quantized_layers: int | None = optional_field()
    cache: str | None = optional_field()
    sensitivity: tuple[Row, ...] | None = optional_field()  # placement="auto": each group's error, ranked
    auto_placement: AutoPlacementRecord | None = optional_field()
    auto_precision: AutoPrecisionRecord | None = optional_field()  # precision="auto": the ladder, each layer's choice
    measured: Mapping[str, float | int] | None = optional_field()
    error_budget: ErrorBudgetRecord | None = optional_field()
    coverage: float | Mapping[str, float] | None = optional_field()  # the INT8 share of MACs (older: shares)
    int8_layers: int | None = optional_field()
    layers_total: int | None = optional_field()
    excluded_layers: list[Mapping[str, str]] | None = optional_field()  # {"layer", "reason"} each
    graph_sha256: str | None = optional_field()
    data_sha256: str | None = optional_field()

    def __post_init__(self) -> None:
        for key, cls in _SUB_RECORDS.items():
            if isinstance(getattr(self, key), Mapping):
                object.__setattr__(self, key, cls.from_dict(getattr(self, key)))
        if isinstance(self.bias_correction, Mapping):
            object.__setattr__(self, "bias_correction", MethodRecord.from_dict(self.bias_correction))
        if self.methods is not None:
            object.__setattr__(self, "methods", _records(self.methods, MethodRow))
        if isinstance(self.sensitivity, list):
            object.__setattr__(self, "sensitivity", tuple(self.sensitivity))


@dataclass(frozen=True, kw_only=True)
class TargetPlanRecord(SidecarRecord):
    """Each quantized layer and the precision it is planned to run as on each target GPU
    (``builder.capability``); ``unaccelerated`` names the layers no target accelerates
    (built only with ``allow_unaccelerated=True``).

    Example:
        >>> TargetPlanRecord.from_dict({"targets": ["sm86"], "layers": [{"layer": "c", "op": "Conv",
        ...     "quantized_as": "int8", "runs_as": {"sm86": "fp16"}}]}).layers[0]["runs_as"]
        {'sm86': 'fp16'}
    """

    flavour: str | None = None
    version: str | None = None
    targets: tuple[str, ...] = ()
    float_precision: str | None = None
    allow_unaccelerated: bool = False
    #: {"layer", "op", "class", "quantized_as", "runs_as": {target: precision}} each.
    layers: tuple[Mapping[str, Any], ...] = ()
    unaccelerated: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "targets", as_tuple(self.targets))
        object.__setattr__(self, "layers", as_tuple(self.layers))
        object.__setattr__(self, "unaccelerated", as_tuple(self.unaccelerated))


@dataclass(frozen=True, kw_only=True)
class ShapeInputRecord(SidecarRecord):
    """An input TensorRT reads as a shape tensor (its values set shapes, e.g. a Reshape's shape) and the
    values the engine was built for (min = opt = max in every profile). A runtime passes exactly these
    values, on host memory.

    Example:
        >>> ShapeInputRecord.from_dict({"name": "shape", "values": [3, 2]}).values
        (3, 2)
    """

    name: str
    values: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "values", tuple(int(v) for v in as_tuple(self.values)))


@dataclass(frozen=True, kw_only=True)
class NMSRecord(SidecarRecord):
    """The fixed-shape NMS appended after the model's raw head (``--nms HEAD``, ``postprocess=trtforge.NMS(...)``):
    its settings, the suppression rounds unrolled in the graph (greedy NMS's result exactly when no suppression
    chain among the candidates is longer), and its outputs in EfficientNMS's convention: ``num_detections``
    (N, 1) int32, ``detection_boxes`` (N, K, 4) float32 x1, y1, x2, y2, ``detection_scores`` (N, K) float32,
    ``detection_classes`` (N, K) int32, padded with zeros to K = ``max_detections``.

    Example:
        >>> NMSRecord.from_dict({"head": "yolo", "score_threshold": 0.25, "iou_threshold": 0.45,
        ...                      "max_detections": 100, "candidates": 1000}).max_detections
        100
    """

    head: str  # yolo | yolov5 | boxes-scores
    score_threshold: float
    iou_threshold: float
    max_detections: int
    candidates: int
    class_agnostic: bool = False
    rounds: int | None = optional_field()
    outputs: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "outputs", as_tuple(self.outputs))


@dataclass(frozen=True, kw_only=True)
class GraphEditsRecord(SidecarRecord):
    """What the build changed in the captured graph before the precision passes: the cut at named tensors
    (``--outputs``: they became the graph's outputs, dead nodes removed) and the post-processing appended
    (``nms``). The reference and processed ONNX files beside the engine hold both edits already.

    Example:
        >>> GraphEditsRecord.from_dict({"outputs": ["boxes", "scores"]}).nms is None
        True
    """

    outputs: tuple[str, ...] | None = optional_field()
    nms: NMSRecord | None = optional_field()

    def __post_init__(self) -> None:
        if self.outputs is not None:
            object.__setattr__(self, "outputs", as_tuple(self.outputs))
        if self.nms is not None:
            object.__setattr__(self, "nms", NMSRecord.from_dict(self.nms))


@dataclass(frozen=True, kw_only=True)
class TunedRecord(SidecarRecord):
    """The deployment ``trtforge tune`` chose for this artifact and what it was measured on: the route, precision,
    batch, profile opt batch and builder knobs; the device (GPU model, or CPU model where there is none), its
    driver and the versions that ran; the measured p50/p99 (ms), throughput (items/s) and accuracy against the
    FP32 reference. ``route="auto"`` uses it only on the same device model.

    Example:
        >>> TunedRecord.from_dict({"route": "onnxruntime", "precision": "fp16", "batch": 1, "device": "AMD EPYC",
        ...                        "device_kind": "cpu"}).route
        'onnxruntime'
    """

    route: str
    precision: str
    batch: int
    opt_batch: int | None = optional_field()
    builder: Mapping[str, Any] = field(default_factory=dict)
    device: str
    device_kind: str
    driver: str | None = optional_field()
    versions: Mapping[str, Any] = field(default_factory=dict)
    measured: Mapping[str, Any] = field(default_factory=dict)
    date_utc: str | None = optional_field()
