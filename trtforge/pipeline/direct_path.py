"""The direct path: PyTorch → TensorRT network (``trtforge.convert``) → build → store, no ONNX."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from rich.console import Console

from trtforge.builder.precision_plan import plan_direct, plan_notes
from trtforge.cache.engine_cache import EngineCache, engine_key
from trtforge.capture.export import normalize_example_inputs
from trtforge.core.config import CompileConfig
from trtforge.core.errors import WrongType
from trtforge.core.sidecar import PrecisionRecord, QuantizationRecord, SourceRecord
from trtforge.pipeline.direct_int8 import direct_int8, int8_report
from trtforge.pipeline.record import Built, build_record
from trtforge.pipeline.store import built_meta, cached_build, direct_converter_hash


def convert_and_build(model: Any, example_inputs: Any, config: CompileConfig, *,
                       engine_cache: EngineCache | None, console: Console, calibration_data: Any = None) -> Built:
    """The direct path: PyTorch → (INT8: calibrate) → TensorRT network (trtforge.convert) → engine-cache
    lookup → build → store.

    The key hashes the recorded network and the converters' source; no ONNX is made.
    """
    from trtforge.builder.build import build_network
    from trtforge.convert.api import lower_for_profiles
    from trtforge.convert.lower import at_batch_rule

    args, kwargs = normalize_example_inputs(model, example_inputs)
    if kwargs:
        raise WrongType("path='direct' takes positional example inputs; pass a tuple of tensors in forward's order")
    input_names = config.input_names or getattr(model, "trtforge_input_names", None)
    output_names = config.output_names or getattr(model, "trtforge_output_names", None)
    quantized = None  # INT8: the plan and the (bias-corrected) module the lowering reads
    if config.precision == "int8":
        quantized = direct_int8(model, args, config, calibration_data, input_names)
    lowered, profiles = at_batch_rule(config, args, lambda batch: lower_for_profiles(
        model if quantized is None else quantized.model, args, batch,
        precision="fp16" if quantized is not None else config.precision,
        input_names=None if input_names is None else list(input_names),
        output_names=None if output_names is None else list(output_names),
        int8=None if quantized is None else quantized.plan), type(model).__name__)
    build_config = replace(config, batch=profiles)  # the one batch rule's profiles (``core.batch.resolve_batch``)
    network_name = f"{config.name}_{config.precision}"
    converter_hash = direct_converter_hash(config)
    key = engine_key(lowered.net.record.canonical(), config, network_name=network_name, converter_hash=converter_hash)

    def build() -> Built:  # the build, and the build's typed record
        net = lowered.net
        result = build_network(net.builder, net.net, net.logger, build_config, name=network_name,
                               progress=config.progress, console=console)
        precision = PrecisionRecord(requested=config.precision, built=config.precision,
                                    fp32_nodes=dict(lowered.fp32_nodes))
        notes = ["direct path (PyTorch → TensorRT, no ONNX): no .onnx beside the engine, so no onnxruntime route"]
        if lowered.fp32_nodes:
            notes.append(f"{len(lowered.fp32_nodes)} node(s) kept in FP32 by the direct path's float rules")
        quantization = target_plan = None
        if quantized is not None:
            target_plan = plan_direct(lowered.int8_layers, config)  # each INT8 layer on each target GPU
            notes += plan_notes(target_plan)
            quantization = QuantizationRecord(**int8_report(quantized, lowered.int8_layers))
            notes.append(f"direct-path INT8: {len(lowered.int8_layers)} layer(s) with Q/DQ from forward-hook "
                         "calibration, the rest FP16")
        record = build_record(result, config, precision, notes, source=SourceRecord(path="direct"),
                              quantization=quantization, converter_hash=converter_hash,
                              target_plan=target_plan.record(config.allow_unaccelerated)
                              if target_plan is not None and target_plan.layers else None)
        return Built.fresh(key, result.plan, record)

    return cached_build(engine_cache, key, build, read=Built.from_entry, meta=built_meta(config))
