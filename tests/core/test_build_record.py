"""The typed build record: trtforge writes no sidecar key that a reader would park in ``extra``, and the
sidecar's known keys come from its dataclass fields."""

from __future__ import annotations

import json
from dataclasses import fields, replace

import pytest
import torch
from tiny_model import EXAMPLE_SHAPE, TinyNet
from trt_double import write_fake_engine

import trtforge
from trtforge.core.build_record import BuildRecord
from trtforge.core.sidecar import (
    BuilderRecord,
    PrecisionRecord,
    QuantizationRecord,
    ShapeInputRecord,
    Sidecar,
    SourceRecord,
    TargetPlanRecord,
    read_sidecar,
    sidecar_keys,
)
from trtforge.core.specs import TensorSpec

RECORD = BuildRecord(
    inputs=(TensorSpec("x", "float32", (-1, 4)),), outputs=(TensorSpec("y", "float32", (-1, 2)),),
    profiles=({"x": {"min": [1, 4], "opt": [2, 4], "max": [8, 4]}},),
    precision=PrecisionRecord(requested="int8", built="int8", node_dtypes={"float16": 3}),
    builder=BuilderRecord(flavour="tensorrt_rtx", version="1.7", targets=("sm86",), build_seconds=0.5),
    source=SourceRecord(onnx_sha256="a" * 64, reference_onnx_sha256="b" * 64), notes=("kept one node",),
    quantization=QuantizationRecord(calibrator="entropy", int8_layers=1),
    shape_inputs=(ShapeInputRecord(name="shape", values=(3, 2)),),
    target_plan=TargetPlanRecord(flavour="tensorrt_rtx", version="1.7", targets=("sm86",), layers=(
        {"layer": "fc", "op": "Gemm", "class": "gemm", "quantized_as": "int8", "runs_as": {"sm86": "fp16"}},)),
)


def test_known_keys_are_the_dataclass_fields():
    sidecar = Sidecar(name="m", engine_file="m.engine", engine_size=1, engine_sha256="0" * 64,
                      build=RECORD.for_engine(), graph_edits={"outputs": ["y"]},
                      tuned={"route": "onnxruntime", "precision": "fp16", "batch": 1, "device": "cpu0",
                             "device_kind": "cpu"})
    assert set(sidecar.to_dict()) == sidecar_keys()  # every field set: the two name the same keys
    assert ({f.name for f in fields(Sidecar)} - {"engine_file", "engine_size", "engine_sha256", "extra", "path", "build"}
            | {f.name for f in fields(BuildRecord)}) <= sidecar_keys()
    assert Sidecar.from_dict({**sidecar.to_dict(), "future": 1}).unknown_keys() == ["future"]
    nested = {**sidecar.to_dict(), "precision": {"mode": "fp32"}}
    assert Sidecar.from_dict(nested).unknown_keys() == ["precision.mode"]


def test_the_record_becomes_the_sidecar_and_survives_the_engine_cache():
    again = BuildRecord.from_dict(json.loads(json.dumps(RECORD.to_dict())))
    assert again == RECORD
    sidecar = Sidecar(name="m", engine_file="m.engine", engine_size=1, engine_sha256="0" * 64,
                      build=again.for_engine(source=SourceRecord(kind="onnx", onnx_file="m.onnx"),
                                             notes=("from the caller",), cache={"key": "k", "hit": True}))
    assert sidecar.source.kind == "onnx" and sidecar.source.onnx_sha256 == "a" * 64
    assert sidecar.notes == ("from the caller", "kept one node") and sidecar.builder.cache == {"key": "k", "hit": True}
    assert sidecar.shape_inputs[0].values == (3, 2) and sidecar.quantization.int8_layers == 1
    assert sidecar.unknown_keys() == []
    # the sidecar holds the build's record (issue 36): the JSON keys as before, the record whole
    assert sidecar.build == replace(RECORD, builder=replace(RECORD.builder, cache={"key": "k", "hit": True}),
                                    source=sidecar.source, notes=("from the caller", "kept one node"))
    read = Sidecar.from_dict(json.loads(json.dumps(sidecar.to_dict())))
    assert read == sidecar and read.build == sidecar.build and read.to_dict() == sidecar.to_dict()
    assert replace(read, builder=replace(read.builder, refittable=True)).build.builder.refittable is True


def test_an_unknown_field_is_refused_when_the_record_is_made():
    with pytest.raises(TypeError, match="mode"):
        PrecisionRecord(mode="fp32")


@pytest.mark.slow
@pytest.mark.needs_trt
@pytest.mark.parametrize("path", ["onnx", "direct"])
def test_compile_writes_no_key_that_lands_in_extra(tmp_path, path):
    torch.manual_seed(0)
    model, example = TinyNet().eval(), (torch.zeros(*EXAMPLE_SHAPE),)
    options = {"cache_dir": tmp_path / "cache", "progress": False, "path": path, "precision": "fp16"}
    fresh = trtforge.compile(model, example, output_dir=tmp_path / "a", **options)
    assert read_sidecar(fresh.sidecar_path).unknown_keys() == []
    hit = trtforge.compile(model, example, output_dir=tmp_path / "b", **options)
    assert hit.sidecar.builder.cache["hit"] is True  # the record read back from the engine cache
    assert read_sidecar(hit.sidecar_path).unknown_keys() == []


def test_the_double_writes_a_sidecar_trtforge_reads_without_extra(tmp_path):
    engine = write_fake_engine(tmp_path, [{"x": [[1, 3], [2, 3], [8, 3]]}])
    assert read_sidecar(engine.with_suffix(".json")).unknown_keys() == []
