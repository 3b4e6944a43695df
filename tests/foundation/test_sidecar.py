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
from trtforge.core.sidecar import EngineHashMismatch, read_sidecar, write_sidecar


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
                           notes="unit test", preprocessing={"layout": "NC"})
    return art


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
    assert data["preprocessing"] == {"layout": "NC"}
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
                             notes="unit test", preprocessing={"layout": "NC"})
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
