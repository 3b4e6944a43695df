"""The sidecar: contents, atomic writes, refusal to overwrite, forward compatibility, hash checks."""

from __future__ import annotations

import json
import os
import stat

import pytest
from onnx import TensorProto, helper

import trtforge
from trtforge.artifact import Artifact
from trtforge.core.atomic import atomic_writer
from trtforge.core.errors import WrongType
from trtforge.core.preprocessing import PreprocessConfig, PreprocessingRecordError
from trtforge.core.sidecar import (
    BuilderRecord,
    EngineHashMismatch,
    EngineRecord,
    MalformedSidecar,
    PrecisionRecord,
    ShapeInputRecord,
    Sidecar,
    SourceRecord,
    read_sidecar,
    write_sidecar,
)

PREPROCESSING = {"resize": [8, 8], "mean": [0.5, 0.5, 0.5], "std": [0.25, 0.25, 0.25], "channel_order": "bgr",
                 "layout": "nhwc"}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sidecar")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor("w", TensorProto.FLOAT, [8, 4], [0.5] * 32)],
    )
    path = tmp / "mm.onnx"
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]).SerializeToString())
    art = trtforge.compile(path, precision="fp16", batch="1:4:16", output_dir=tmp / "out", progress=False,
                           notes="unit test", preprocessing=PREPROCESSING)
    return art


def test_a_preprocessing_record_the_predictor_cannot_use_is_refused_before_the_build(built, tmp_path):
    source = built.onnx_path.parent / "mm_reference_fp32.onnx"
    with pytest.raises(PreprocessingRecordError, match="no 'resize'"):
        trtforge.compile(source, precision="fp16", output_dir=tmp_path / "bad", progress=False,
                         preprocessing={"layout": "NC"})
    assert not (tmp_path / "bad").exists() or not any((tmp_path / "bad").iterdir())


def test_sidecar_contents(built):
    data = json.loads(built.sidecar_path.read_text())
    assert data["schema_version"] == 1 and data["generator"] == "trtforge"
    assert data["trtforge_version"] == trtforge.__version__
    assert data["source"]["kind"] == "onnx" and len(data["source"]["onnx_sha256"]) == 64
    assert data["engine"] == {"file": "mm_fp16.engine", "size": built.engine_path.stat().st_size,
                              "sha256": data["engine"]["sha256"]}
    assert data["inputs"] == [{"name": "x", "dtype": "float32", "shape": [-1, 8]}]
    assert data["outputs"] == [{"name": "y", "dtype": "float32", "shape": [-1, 4]}]
    assert data["profiles"] == [{"x": {"min": [1, 8], "opt": [4, 8], "max": [16, 8]}}]
    assert data["precision"]["requested"] == "fp16" and data["precision"]["built"] == "fp16"
    assert data["precision"]["node_dtypes"]["float16"] >= 1
    assert {"flavour", "version", "targets", "optimization_level"} <= set(data["builder"])
    assert data["preprocessing"] == {"resize": [8, 8], "interpolation": "bilinear", "antialias": False,
                                     "mean": [0.5, 0.5, 0.5], "std": [0.25, 0.25, 0.25], "scale": 1 / 255,
                                     "channel_order": "BGR", "layout": "NHWC", "resize_mode": "stretch",
                                     "pad_value": 114.0}
    assert read_sidecar(built.sidecar_path).preprocessing == PreprocessConfig(
        (8, 8), mean=(0.5,) * 3, std=(0.25,) * 3, channel_order="BGR", layout="NHWC")
    assert data["notes"] == ["unit test"]


def test_sidecar_has_engine_permission_bits(built):
    os.chmod(built.engine_path, 0o640)
    sc = read_sidecar(built.sidecar_path)
    write_sidecar(built.sidecar_path, sc)
    assert stat.S_IMODE(built.sidecar_path.stat().st_mode) == 0o640
    os.chmod(built.engine_path, 0o644)
    write_sidecar(built.sidecar_path, sc)


def test_readers_ignore_unknown_keys(built, tmp_path):
    data = json.loads(built.sidecar_path.read_text())
    data["future_block"] = {"anything": [1, 2]}
    copy = tmp_path / "mm_fp16.json"
    copy.write_text(json.dumps(data))
    (tmp_path / "mm_fp16.engine").write_bytes(built.engine_path.read_bytes())
    sc = read_sidecar(copy)
    assert sc.extra == {"future_block": {"anything": [1, 2]}}
    sc.verify_engine()
    write_sidecar(copy, sc)
    assert json.loads(copy.read_text())["future_block"] == {"anything": [1, 2]}


def test_hash_mismatch_refused(built, tmp_path):
    copy = tmp_path / "mm_fp16.json"
    copy.write_text(built.sidecar_path.read_text())
    engine = tmp_path / "mm_fp16.engine"
    data = bytearray(built.engine_path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    engine.write_bytes(bytes(data))
    with pytest.raises(EngineHashMismatch, match="does not match its sidecar"):
        Artifact.open(copy)


def test_refuses_foreign_json(built, tmp_path):
    foreign = tmp_path / "mm_fp16.json"
    foreign.write_text('{"user": "data"}')
    with pytest.raises(FileExistsError, match="not written by trtforge"):
        write_sidecar(foreign, read_sidecar(built.sidecar_path))
    assert foreign.read_text() == '{"user": "data"}'


def test_atomic_write_leaves_old_file_on_failure(tmp_path):
    target = tmp_path / "file.bin"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError), atomic_writer(target) as handle:
        handle.write(b"new but half")
        raise RuntimeError("crash mid-write")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["file.bin"]  # no temp file left behind


def test_rebuild_overwrites_own_files(built):
    before = built.sidecar_path.read_text()
    again = trtforge.compile(built.onnx_path.parent / "mm_reference_fp32.onnx", name="mm", precision="fp16",
                             batch="1:4:16", output_dir=built.engine_path.parent, progress=False,
                             notes="unit test", preprocessing=PREPROCESSING)
    assert json.loads(again.sidecar_path.read_text())["engine"] == json.loads(before)["engine"]


def test_atomic_writes_get_the_mode_open_would_give(tmp_path):
    """mkstemp creates 0600 files; an atomic write must land like open() would (0666 less the umask)."""
    import os

    from trtforge.core.atomic import atomic_write_bytes, default_mode

    umask = os.umask(0)
    os.umask(umask)
    target = tmp_path / "x.onnx"
    atomic_write_bytes(target, b"abc")
    assert default_mode() == 0o666 & ~umask
    assert (target.stat().st_mode & 0o777) == default_mode()
    atomic_write_bytes(target, b"abcd", mode=0o600)
    assert (target.stat().st_mode & 0o777) == 0o600 and target.read_bytes() == b"abcd"


def test_typed_records_round_trip_the_json_exactly(built):
    data = json.loads(built.sidecar_path.read_text())
    sc = read_sidecar(built.sidecar_path)
    assert sc.to_dict() == data  # same keys, same values, nothing added or dropped
    assert isinstance(sc.builder, BuilderRecord) and isinstance(sc.precision, PrecisionRecord)
    assert sc.precision.built == "fp16" and sc.precision.node_dtypes == data["precision"]["node_dtypes"]
    assert sc.builder.targets == tuple(data["builder"]["targets"]) and sc.source.kind == "onnx"
    assert sc.engine == EngineRecord(file="mm_fp16.engine", size=built.engine_path.stat().st_size,
                                     sha256=data["engine"]["sha256"])
    assert sc.source.onnx_file == built.onnx_path.name and sc.quantization is None


def test_older_sidecars_read_with_defaults_and_unknown_keys_survive(built, tmp_path):
    data = json.loads(built.sidecar_path.read_text())
    for key in ("precision", "builder", "source", "profiles", "notes", "preprocessing"):
        del data[key]  # an older, sparser writer
    data["quantization"] = {"calibrator": "entropy", "future_metric": 0.5}  # a newer writer's key in a record
    sc = Sidecar.from_dict(data)
    assert sc.precision == PrecisionRecord() and sc.precision.built is None and sc.precision.node_dtypes == {}
    assert sc.builder.host_code is False and sc.builder.targets == () and sc.builder.flavour is None
    assert sc.source == SourceRecord() and sc.profiles == () and sc.notes == () and sc.preprocessing is None
    assert sc.quantization.calibrator == "entropy" and sc.quantization.extra == {"future_metric": 0.5}
    again = sc.to_dict()
    assert again["quantization"]["future_metric"] == 0.5 and again["engine"] == data["engine"]
    assert Sidecar.from_dict(again) == sc


def test_sub_records_accept_dicts_or_records():
    common = dict(name="m", engine_file="m.engine", engine_size=1, engine_sha256="0" * 64, inputs=(), outputs=(),
                  profiles=({"x": {"min": (1, 3), "opt": [2, 3], "max": [4, 3]}},))
    from_dicts = Sidecar(**common, precision={"built": "int8"}, builder={"targets": ["sm86"], "refittable": True},
                         source={"kind": "torch", "factory": "trtforge.zoo:efficientnet_lite0"})
    from_records = Sidecar(**common, precision=PrecisionRecord(built="int8"),
                           builder=BuilderRecord(targets=("sm86",), refittable=True),
                           source=SourceRecord(kind="torch", factory="trtforge.zoo:efficientnet_lite0"))
    assert from_dicts == from_records and from_dicts.builder.refittable is True
    assert from_dicts.profiles == ({"x": {"min": [1, 3], "opt": [2, 3], "max": [4, 3]}},)  # plain JSON lists
    with pytest.raises(WrongType, match="JSON object"):
        Sidecar(**common, precision="fp16", builder={}, source={})


def test_shape_inputs_round_trip_and_a_bad_list_is_malformed(built):
    data = json.loads(built.sidecar_path.read_text())
    assert "shape_inputs" not in data  # written only when the engine has shape-tensor inputs
    data["shape_inputs"] = [{"name": "repeats", "values": [3, 2]}]
    sc = Sidecar.from_dict(data)
    assert sc.shape_inputs == (ShapeInputRecord(name="repeats", values=(3, 2)),) and sc.to_dict() == data
    data["shape_inputs"] = [{"name": "repeats", "values": [3.5]}]
    with pytest.raises(MalformedSidecar, match="shape_inputs"):
        Sidecar.from_dict(data)


def test_target_plan_round_trips_and_is_absent_without_quantized_layers(built):
    data = json.loads(built.sidecar_path.read_text())
    assert "target_plan" not in data  # an FP16 build has no quantized layer
    data["target_plan"] = {"flavour": "tensorrt_rtx", "version": "1.7.1.116", "targets": ["sm86", "sm89"],
                           "float_precision": "fp16", "allow_unaccelerated": True, "unaccelerated": ["c"],
                           "layers": [{"layer": "c", "op": "Conv", "class": "conv", "quantized_as": "int8",
                                       "runs_as": {"sm86": "fp16", "sm89": "fp16"}}], "future": 1}
    sc = Sidecar.from_dict(data)
    assert sc.target_plan.targets == ("sm86", "sm89") and sc.target_plan.unaccelerated == ("c",)
    assert sc.target_plan.extra == {"future": 1} and sc.to_dict() == data
    data["target_plan"] = ["not", "an", "object"]
    with pytest.raises(WrongType, match="JSON object"):
        Sidecar.from_dict(data)
