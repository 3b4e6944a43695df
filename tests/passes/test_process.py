"""One pass sequence: ``trtforge.compile`` and refit process a graph through the same ``process()``.

A compile serialises its processed graph once: the bytes it hashes into the engine key, builds
from and writes beside the engine are the bytes ``process()`` gives, and refit re-derives exactly
those bytes from the same ONNX.
"""

from __future__ import annotations

import ast
import hashlib
import inspect

import onnx
import pytest

import trtforge.pipeline as pipeline
import trtforge.pipeline.onnx_path as onnx_path
from trtforge import refit
from trtforge.core.sidecar import read_sidecar
from trtforge.passes.graph import proto_bytes
from trtforge.passes.process import process, reference_graph

pytestmark = [pytest.mark.needs_trt, pytest.mark.usefixtures("private_engine_cache")]


@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16"])
def test_compile_and_refit_process_byte_identical_graphs(tiny_onnx, tmp_path, precision):
    art = pipeline.compile(tiny_onnx, output_dir=tmp_path / "out", precision=precision, cache=False, progress=False)
    built = art.onnx_path.read_bytes()
    direct = proto_bytes(process(reference_graph(onnx.load(str(tiny_onnx))), precision).model)
    via_refit = proto_bytes(refit._process_like_build(onnx.load(str(tiny_onnx)), precision))
    assert built == direct == via_refit
    # The bytes written are the bytes hashed into the sidecar (one serialisation feeds every use).
    sidecar = read_sidecar(art.sidecar_path)
    assert sidecar.source.onnx_sha256 == hashlib.sha256(built).hexdigest()


def test_capture_and_build_serialises_each_graph_once_by_design():
    """The build step names one serialisation per graph and no parse: no to_proto/load_ir/load_from_string."""
    tree = ast.parse(inspect.getsource(onnx_path.capture_and_build))
    calls = [node.func for node in ast.walk(tree) if isinstance(node, ast.Call)]
    names = [getattr(f, "id", getattr(f, "attr", "")) for f in calls]
    assert names.count("proto_bytes") == 2  # the reference, and the processed graph (FP32 reuses the first)
    assert not {"to_proto", "load_ir", "load_from_string", "SerializeToString", "deserialize_model"} & set(names)
    assert "process" in inspect.getsource(onnx_path._process)
    assert "process(" in inspect.getsource(refit._process_like_build)


def test_a_graph_is_cleaned_once_per_process_and_each_build_gets_its_own_reference(tiny_onnx, monkeypatch):
    """A precision sweep of one file cleans it once: the second reference comes from the first's bytes, equal to
    a fresh cleanup's, and is a model of its own (a pass that edits one leaves the other as it was)."""
    import trtforge.passes.process as process_module

    source = onnx.load(str(tiny_onnx))
    source.doc_string = f"unique to {__name__}"  # another graph than any earlier test cleaned
    expected = proto_bytes(process_module.cleanup(process_module.load_ir(onnx.ModelProto.FromString(
        source.SerializeToString()))))
    untouched = source.SerializeToString(deterministic=True)
    calls = []
    real = process_module.cleanup
    monkeypatch.setattr(process_module, "cleanup", lambda model: calls.append(1) or real(model))
    first, second = reference_graph(source), reference_graph(source)
    assert len(calls) == 1
    assert first is not second and proto_bytes(first) == proto_bytes(second) == expected
    assert source.SerializeToString(deterministic=True) == untouched  # the caller's graph is not cleaned in place
    first.graph.remove(first.graph[0], safe=False)
    assert proto_bytes(second) == proto_bytes(reference_graph(source)) == expected != proto_bytes(first)
