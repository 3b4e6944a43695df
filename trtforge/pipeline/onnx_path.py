"""The ONNX path: capture → passes (range probe, flavour probes) → (quantize) → build → store."""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import onnx
import onnx_ir as ir
from rich.console import Console

from trtforge.builder.build import BuildResult, build_engine
from trtforge.builder.precision_plan import plan_graph, plan_notes
from trtforge.builder.progress import stage_progress
from trtforge.cache.engine_cache import EngineCache, engine_key
from trtforge.capture.export import export_onnx, normalize_example_inputs
from trtforge.capture.onnx_file import load_onnx
from trtforge.core.batch import resolve_batch
from trtforge.core.config import AUTO_PRECISION, QUANTIZED_REQUESTS, CompileConfig, QuantConfig
from trtforge.core.errors import InvalidArgument
from trtforge.core.sidecar import PrecisionRecord, QuantizationRecord, SourceRecord
from trtforge.core.specs import TensorSpec, shape_value_candidates
from trtforge.passes.finite_guard import example_feeds, finite_process
from trtforge.passes.graph import copy_model, dtype_summary, proto_bytes
from trtforge.passes.process import Processed, process, reference_graph
from trtforge.passes.range_probe import probe
from trtforge.pipeline.flavour import capability_probe, flavour_keep
from trtforge.pipeline.record import Built, build_record
from trtforge.pipeline.store import built_meta, cached_build

log = logging.getLogger(__name__)


def capture_and_build(model_or_onnx: Any, example_inputs: Any, config: CompileConfig, *, tmp: Path,
                       calibration_data: Any, engine_cache: EngineCache | None, console: Console) -> Built:
    """Capture → passes → (quantize) → engine-cache lookup → build → store."""
    name, progress = config.name, config.progress
    proto = _capture(model_or_onnx, example_inputs, tmp, config, console)
    proto, edit_notes = _cut(proto, config)
    # 2. Passes: cleanup (the FP32 reference), then precision; each graph is serialised once.
    reference = reference_graph(proto)
    if config.dynamic_batch:  # a static file made batchable, proven on the reference (passes.dynamic_batch)
        from trtforge.passes.dynamic_batch import make_batch_dynamic

        reference = make_batch_dynamic(reference, config.batched_inputs)
    head = reference  # the model's own outputs: what quantization calibrates and measures
    if config.postprocess is not None:  # part of the FP32 reference: every precision builds the same NMS
        reference = _postprocessed(copy_model(head), config)
        edit_notes.append(f"post-processing appended: {config.postprocess!r}, FP32 at every precision")
    reference_bytes = proto_bytes(reference)
    feeds = probe_feeds(model_or_onnx, example_inputs, reference)
    processed, quant_report = _process(reference, config, calibration_data, feeds, head)
    target_plan = plan_graph(processed.model, config, capability_probe(config))  # each quantized layer, each GPU
    float_plan, built_precision = processed.float_plan, processed.built_precision
    processed_bytes = reference_bytes if processed.model is reference else proto_bytes(processed.model)
    network_name = f"{name}_{built_precision}"
    shape_values = shape_value_candidates(feeds[0]) if feeds else {}
    build_config = _with_example_batch(config, reference, feeds)
    key = engine_key(processed_bytes, build_config, network_name=network_name, shape_values=shape_values)

    def build() -> Built:  # 3. Build, and the build's typed record
        staged = tmp / "processed.onnx"
        staged.write_bytes(processed_bytes)
        source = str(model_or_onnx) if isinstance(model_or_onnx, (str, Path)) else type(model_or_onnx).__name__
        result: BuildResult = build_engine(staged, build_config, name=network_name, progress=progress, console=console,
                                           source=source, input_values=shape_values)
        notes = [*edit_notes, *plan_notes(target_plan)]
        if float_plan is not None and float_plan.fp32_nodes:
            notes.append(f"{len(float_plan.fp32_nodes)} node(s) kept in FP32 by the float pass")
        precision = PrecisionRecord(requested=config.precision, built=built_precision,
                                    node_dtypes=dtype_summary(processed.model),
                                    fp32_nodes=dict(float_plan.fp32_nodes) if float_plan else {})
        source = SourceRecord(onnx_sha256=hashlib.sha256(processed_bytes).hexdigest(),
                              reference_onnx_sha256=hashlib.sha256(reference_bytes).hexdigest())
        quantization = None if quant_report is None else QuantizationRecord(**quant_report)
        record = build_record(result, config, precision, notes, source=source, quantization=quantization,
                              target_plan=target_plan.record(config.allow_unaccelerated) if target_plan.layers
                              else None)
        return Built.fresh(key, result.plan, record, processed_bytes, reference_bytes)

    return cached_build(engine_cache, key, build, read=Built.from_entry, meta=built_meta(config))


def _cut(proto: onnx.ModelProto, config: CompileConfig) -> tuple[onnx.ModelProto, list[str]]:
    """The captured graph cut at ``config.outputs`` (``passes.cut``), and the sidecar note that records the cut."""
    if not config.outputs:
        return proto, []
    from trtforge.passes.cut import cut_graph
    from trtforge.passes.graph import load_ir, to_proto

    model = load_ir(proto)
    removed = cut_graph(model, config.outputs)
    return to_proto(model), [f"graph cut at outputs {', '.join(config.outputs)} ({removed} node(s) removed)"]


def _capture(model_or_onnx: Any, example_inputs: Any, tmp: Path, config: CompileConfig,
             console: Console | None = None) -> onnx.ModelProto:
    """The model as ONNX: a file as it is, a module exported with a dynamic batch on its batched inputs
    (a spinner with the elapsed time shows while the exporter runs)."""
    if isinstance(model_or_onnx, (str, Path)):
        return load_onnx(Path(model_or_onnx))
    input_names = config.input_names or getattr(model_or_onnx, "trtforge_input_names", None)
    output_names = config.output_names or getattr(model_or_onnx, "trtforge_output_names", None)
    exports, export_key = _EXPORTS.get(), (id(model_or_onnx), id(example_inputs), input_names, output_names,
                                           config.batched_inputs)
    if exports is not None and export_key in exports:  # build_matrix: the module was exported for another target
        (tmp / "captured.onnx").write_bytes(exports[export_key])
        return load_onnx(tmp / "captured.onnx")
    with stage_progress(f"{config.name}: exporting {type(model_or_onnx).__name__} to ONNX (torch.onnx)",
                        enabled=config.progress, console=console):
        path = export_onnx(model_or_onnx, example_inputs, tmp / "captured.onnx", input_names=input_names,
                           output_names=output_names, dynamic_batch=True, batched_inputs=config.batched_inputs)
    if exports is not None:
        exports[export_key] = path.read_bytes()
    return load_onnx(path)


#: Inside ``one_export_per_call``: the modules exported so far (by module, example inputs and export options).
_EXPORTS: contextvars.ContextVar[dict[tuple, bytes] | None] = contextvars.ContextVar("trtforge_exports", default=None)


@contextlib.contextmanager
def one_export_per_call() -> Iterator[None]:
    """Within the block, a module is exported to ONNX once and that graph serves every later compile of it
    (``build_matrix``: one export for all its targets; the export does not depend on the target).

    Example:
        >>> with one_export_per_call():
        ...     arts = [compile(model, (x,), targets=[t]) for t in ("sm86", "sm89")]  # one export
    """
    token = _EXPORTS.set({})
    try:
        yield
    finally:
        _EXPORTS.reset(token)


def probe_feeds(model_or_onnx: Any, example_inputs: Any, reference: ir.Model) -> list[dict[str, Any]]:
    """The inputs the range probe runs: a module's example inputs, or a dict of arrays given with an ONNX file."""
    names = [v.name for v in reference.graph.inputs if not v.is_initializer()]
    if isinstance(model_or_onnx, (str, Path)):
        if isinstance(example_inputs, Mapping):
            return [{k: _numpy(v) for k, v in example_inputs.items()}]
        return []
    args, kwargs = normalize_example_inputs(model_or_onnx, example_inputs)
    tensors = [*args, *kwargs.values()]
    return [dict(zip(names, map(_numpy, tensors), strict=True))] if len(tensors) == len(names) else []


def _numpy(value: Any) -> Any:
    return value.detach().cpu().numpy() if hasattr(value, "detach") else value


def _check_probe_feeds(reference: ir.Model, feeds: Mapping[str, Any], precision: str) -> None:
    """The range probe runs the graph on the example inputs: they must give every graph input."""
    missing = [v.name for v in reference.graph.inputs if not v.is_initializer() and v.name not in feeds]
    if missing:
        raise InvalidArgument(
            f"the example inputs miss graph input(s) {missing}; the {precision} range probe runs the graph on "
            f"them: give every input in the dict (name → array), e.g. {{{missing[0]!r}: array, ...}}")


def _postprocessed(model: ir.Model, config: CompileConfig) -> ir.Model:
    """``model`` with ``config.postprocess`` (the fixed-shape NMS) appended, or as it is."""
    if config.postprocess is None:
        return model
    from trtforge.passes.nms import append_nms

    return append_nms(model, config.postprocess)


def _process(reference: ir.Model, config: CompileConfig, calibration_data: Any,
             feeds: list[dict[str, Any]], head: ir.Model) -> tuple[Processed, dict | None]:
    """The processed graph for ``config.precision`` (INT8: quantize first, for the plan) and the INT8 report.

    Quantization calibrates and measures ``head``, the model's own outputs (the reference before the appended
    post-processing: detections that change order are no error measure); the post-processing joins after it.

    FP16/BF16: the range probe runs the reference on ``feeds`` and keeps what leaves the low type's range; FP16:
    the non-finite guard (``passes.finite_guard``) keeps what turns the outputs NaN/inf, or refuses.
    """
    if config.precision not in QUANTIZED_REQUESTS:
        if feeds and config.float_dtype:
            _check_probe_feeds(reference, feeds[0], config.precision)
        keep = probe(reference, feeds, config.float_dtype) if feeds and config.float_dtype else {}
        if config.float_dtype:
            keep.update(flavour_keep(reference, config, keep))
        if config.float_dtype == "float16":  # outputs non-finite where FP32's are not: FP32 islands, or refused
            return finite_process(reference, config.precision, feeds or example_feeds(reference), keep,
                                  config.fp32_patterns), None
        return process(reference, config.precision, keep=keep or None, keep_fp32=config.fp32_patterns), None
    if config.precision == AUTO_PRECISION:  # per layer, what every target accelerates, within the budget
        from trtforge.builder.precision_plan import auto_ladder
        from trtforge.quantize.auto_precision import quantize_auto

        result = quantize_auto(head, calibration_data, config.quant, auto_ladder(config, capability_probe(config)),
                               preprocessing=config.preprocessing, progress=config.progress)
    else:
        from trtforge.quantize.quantizer import quantize_model

        result = quantize_model(head, calibration_data, config.quant if config.quant is not None else QuantConfig(),
                                preprocessing=config.preprocessing, progress=config.progress, precision=config.precision)
    processed = process(_postprocessed(result.fp32, config), result.plan.precision, result.plan)
    if processed.built_precision not in (config.precision, result.plan.precision):
        log.warning(no_quantized_line(config.name, config.precision, result.plan.excluded))
    return processed, result.report


def no_quantized_line(name: str, precision: str, excluded: Sequence[tuple[str, str]]) -> str:
    """The warning when a quantized build quantizes no layer: the engine is FP16, and so are its file names."""
    why = f"{len(excluded)} candidate layer(s) kept in FP16, e.g. {excluded[0][0]}: {excluded[0][1]}" if excluded \
        else f"the graph has no Conv, MatMul or Gemm layer that {precision} speeds up"
    return (f"precision {precision}: no layer was quantized ({why}); the engine is FP16 and is written as {name}_fp16.*. "
            "Build fp16 directly, or see the sidecar's quantization report (trtforge inspect)")


def _with_example_batch(config: CompileConfig, reference: ir.Model, feeds: list[dict[str, Any]]) -> CompileConfig:
    """The build's batch by the one batch rule (``core.batch.resolve_batch``), the graph's dynamic dim 0s as
    its batched inputs; the sidecar still records the options as given."""
    if config.batch is not None or not feeds:
        return config
    from trtforge.builder.profiles import batched_specs

    specs = [TensorSpec(v.name, "", tuple(d if isinstance(d, int) else -1 for d in v.shape or ()))
             for v in reference.graph.inputs if not v.is_initializer()]
    batch = resolve_batch(config, feeds[0], batched_specs(specs, config.batched_inputs, {}))
    return config if batch is None else replace(config, batch=batch)
