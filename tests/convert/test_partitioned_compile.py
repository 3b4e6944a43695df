"""``compile(model, inputs, path="direct", min_block_size=...)`` partitions: the ops with no converter (and
those ``torch_executed_ops`` names) stay in PyTorch, the rest is built with the one builder, and the
partitioned module's folder comes back. It loads and runs with its engine parts on the reference evaluator
(CPU) or through the TensorRT route (here: the TensorRT double, whose ``network`` engines run each part's
recorded network), and matches PyTorch either way."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest
import torch
import trt_double
from custom_op_model import conv_jiggle_head
from trt_double import FAKE_CUDA, mirror_partitioned
from typer.testing import CliRunner

import trtforge
from trtforge.artifact import PartitionedArtifact, load_partitioned_module
from trtforge.cli import app
from trtforge.convert.lower import UnsupportedOp
from trtforge.convert.partition import EngineModule, partition
from trtforge.convert.saved import load_partitioned
from trtforge.core.config import CompileConfig, ConfigError
from trtforge.core.errors import InvalidArgument
from trtforge.core.routes import EVALUATOR_ROUTE, PARTITION_ROUTES

pytestmark = pytest.mark.needs_trt

TOLERANCE = {"rtol": 1e-4, "atol": 1e-5}


def _x(b: int) -> torch.Tensor:
    return torch.randn(b, 3, 8, 8, generator=torch.Generator().manual_seed(b))


def _options(tmp_path, **more):
    return {"path": "direct", "precision": "fp32", "batch": (1, 2, 4), "output_dir": tmp_path / "out",
            "cache_dir": tmp_path / "cache", "progress": False, **more}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """One partitioned compile (two TensorRT-RTX builds), shared: the model and its artifact."""
    model = conv_jiggle_head()
    art = trtforge.compile(model, (_x(2),), **_options(tmp_path_factory.mktemp("partitioned"), min_block_size=2))
    return model, art


def _engine_parts(module: torch.nn.Module) -> list[EngineModule]:
    return [m for m in module.modules() if isinstance(m, EngineModule)]


# -- the config fields ---------------------------------------------------------------------------

@pytest.mark.parametrize(("options", "line"), [
    ({"min_block_size": 0}, "min_block_size=0: give a positive integer"),
    ({"min_block_size": 2.5}, "min_block_size=2.5: give a positive integer"),
    ({"torch_executed_ops": ["softmax"]}, "torch_executed_ops='softmax': name an op as the exported graph does"),
    ({"torch_executed_ops": "torch.ops.aten.relu"}, "aten.NAME or aten.NAME.OVERLOAD"),
])
def test_bad_partition_options_are_one_line(options, line):
    with pytest.raises(InvalidArgument, match=line):
        CompileConfig(**options)


def test_partition_options_are_normalised_and_read_by_the_request_key_only_when_set():
    config = CompileConfig(torch_executed_ops="aten.softmax")
    assert config.torch_executed_ops == ("aten.softmax",) and config.partitions and config.block_size == 3
    assert not CompileConfig().partitions and "partition" not in CompileConfig().graph_fields()
    assert CompileConfig(min_block_size=2).graph_fields()["partition"] == {"min_block_size": 2,
                                                                           "torch_executed_ops": []}


def test_partitioning_is_refused_off_the_direct_path_and_for_int8(tmp_path, tiny_onnx):
    with pytest.raises(ConfigError, match=r"min_block_size=2 partitions the direct path.*path='direct'"):
        trtforge.compile(tiny_onnx, min_block_size=2, output_dir=tmp_path)
    with pytest.raises(ConfigError, match="a partitioned module builds float engines"):
        trtforge.compile(conv_jiggle_head(), (_x(2),), path="direct", precision="int8", calibration_data=[_x(2)],
                         torch_executed_ops=["aten.relu"], allow_unaccelerated=True, output_dir=tmp_path)


def test_cli_declares_the_flags_and_refuses_bad_values_in_one_line(tmp_path):
    runner = CliRunner()
    result = runner.invoke(app, ["build", "m.onnx", "--min-block-size", "0", "-o", str(tmp_path)])
    assert result.exit_code == 2 and "--min-block-size 0: give a positive integer" in result.output
    assert "Traceback" not in result.output
    result = runner.invoke(app, ["build", "m.onnx", "--torch-executed-op", "softmax", "-o", str(tmp_path)])
    assert result.exit_code == 2 and "--torch-executed-op softmax: name an op" in result.output


# -- compile(path="direct") ----------------------------------------------------------------------

@pytest.mark.slow
def test_an_unsupported_op_without_partitioning_is_one_line_naming_the_op_and_the_fix(tmp_path):
    with pytest.raises(UnsupportedOp, match=r"no converter for trtforge_doubles\.jiggle\.default.*min_block_size=3"):
        trtforge.compile(conv_jiggle_head(), (_x(2),), **_options(tmp_path))
    assert not (tmp_path / "out" / "conv_jiggle_head_fp32_partitioned").exists()


@pytest.mark.slow
def test_compile_partitions_and_the_folder_loads_and_matches_pytorch(compiled):
    model, art = compiled
    assert isinstance(art, PartitionedArtifact) and art.manifest_path.is_file()
    assert art.folder.name == "conv_jiggle_head_fp32_partitioned" and len(art.engines) == 2
    module, report = load_partitioned(art.folder)  # the saved-partition loader, engine parts on the evaluator
    assert set(report.engines) == set(art.engines) and all(p.plan for p in _engine_parts(module))
    assert "jiggle" in module.code  # the op with no converter runs in PyTorch, between the engines
    for batch in (1, 3):
        torch.testing.assert_close(module(_x(batch)), model(_x(batch)), **TOLERANCE)


def _entries(cache: Path) -> list[str]:
    return sorted(p.name for p in (cache / "entries").glob("*.json"))


def _plans(art: PartitionedArtifact) -> dict[str, bytes]:
    return {name: (art.folder / f"{name}.engine").read_bytes() for name in art.engines}


@pytest.mark.slow
def test_a_repeated_partitioned_compile_builds_no_part_and_still_matches_pytorch(compiled):
    """Each engine part is an engine-cache entry, keyed by its own network and build settings: the second
    identical compile reads every part from the cache (no entry added), and its folder loads and matches."""
    model, first = compiled
    base = first.folder.parents[1]
    entries, plans = _entries(base / "cache"), _plans(first)
    assert len(entries) == len(first.engines) == 2  # one entry per engine part
    assert first.cache_hits == () and set(first.built) == set(first.engines)
    second = trtforge.compile(model, (_x(2),), **_options(base, min_block_size=2))
    assert second.folder == first.folder and second.built == ()
    assert set(second.cache_hits) == set(second.engines) == set(first.engines)
    assert _entries(base / "cache") == entries and _plans(second) == plans
    module = second.load(route=EVALUATOR_ROUTE)  # the sidecars check each engine's sha256 as it loads
    for batch in (1, 3):
        torch.testing.assert_close(module(_x(batch)), model(_x(batch)), **TOLERANCE)


@pytest.mark.slow
def test_partition_options_rebuild_only_the_parts_whose_graphs_they_change(compiled, tmp_path):
    """Against the cache of ``min_block_size=2``: forcing softmax into PyTorch changes the head's part only
    (built; the conv part is a hit); ``min_block_size=4`` drops the conv part to PyTorch and serves the
    unchanged head from the cache."""
    model, first = compiled
    cache = first.folder.parents[1] / "cache"
    options = {**_options(tmp_path), "cache_dir": cache}
    conv_part = next(name for name in first.engines if "convolution" in
                     {layer.kind for layer in load_partitioned(first.folder)[0].get_submodule(name).record.layers})
    head_part = next(name for name in first.engines if name != conv_part)
    forced = trtforge.compile(model, (_x(2),), **options, min_block_size=2, torch_executed_ops=["aten._softmax"])
    assert set(forced.engines) == {conv_part, head_part}
    assert forced.cache_hits == (conv_part,) and forced.built == (head_part,)
    assert len(_entries(cache)) == 3
    torch.testing.assert_close(forced.load(route=EVALUATOR_ROUTE)(_x(3)), model(_x(3)), **TOLERANCE)
    larger = trtforge.compile(model, (_x(2),), **options, min_block_size=4)
    assert larger.engines == (head_part,) and larger.cache_hits == (head_part,) and larger.built == ()
    assert "< min_block_size=4" in larger.pytorch[conv_part] and len(_entries(cache)) == 3
    torch.testing.assert_close(larger.load(route=EVALUATOR_ROUTE)(_x(3)), model(_x(3)), **TOLERANCE)


@pytest.mark.slow
def test_torch_executed_ops_keep_the_named_ops_in_pytorch(tmp_path):
    model = conv_jiggle_head()
    art = trtforge.compile(model, (_x(2),), **_options(tmp_path, min_block_size=1,
                                                      torch_executed_ops=["aten._softmax"]))
    assert any("aten._softmax.default is in torch_executed_ops" in why for why in art.pytorch.values())
    manifest = json.loads(art.manifest_path.read_text())
    assert manifest["torch_executed_ops"] == ["aten._softmax"]
    module = art.load(route=EVALUATOR_ROUTE)
    assert "_softmax" in module.code
    for part in _engine_parts(module):
        assert "softmax" not in {layer.kind for layer in part.record.layers}
    torch.testing.assert_close(module(_x(3)), model(_x(3)), **TOLERANCE)


@pytest.mark.slow
def test_partition_is_a_thin_call_into_the_compile_code():
    model = conv_jiggle_head()
    config = CompileConfig(precision="fp32", batch=(1, 2, 4), min_block_size=2, torch_executed_ops=["aten.relu"],
                           progress=False)
    module, report = partition(model, (_x(2),), config, build=False)
    assert report.torch_executed_ops == ("aten.relu",) and report.min_block_size == 2
    assert any("aten.relu.default is in torch_executed_ops" in why for why in report.pytorch.values())
    torch.testing.assert_close(module(_x(3)), model(_x(3)), **TOLERANCE)


# -- runners ---------------------------------------------------------------------------------------

@pytest.fixture
def mirrored(compiled, tmp_path):
    """The compiled folder copied, its engine parts replaced by the double's ``network`` engines."""
    model, art = compiled
    folder = tmp_path / art.folder.name
    shutil.copytree(art.folder, folder)
    mirror_partitioned(folder)
    trt_double.NETWORK_RUNS.clear()
    return model, folder


def test_the_tensorrt_runner_runs_each_engine_part_through_the_tensorrt_route(mirrored, fake_trt):
    model, folder = mirrored
    module = load_partitioned_module(folder, route="tensorrt", device="cuda:0", bindings=fake_trt.bindings,
                                     devices=FAKE_CUDA)
    parts = _engine_parts(module)
    assert module.trtforge_route == "tensorrt" and {p.route for p in parts} == {"tensorrt"}
    for batch in (1, 3):
        torch.testing.assert_close(module(_x(batch)), model(_x(batch)), **TOLERANCE)
    # every engine part ran as a TensorRT engine (the double's kernel), once per call
    records = {str(folder / f"{name}.record.pt") for name, p in module.named_modules() if isinstance(p, EngineModule)}
    assert len(records) == 2 and Counter(trt_double.NETWORK_RUNS) == dict.fromkeys(records, 2)


def test_the_evaluator_route_runs_no_engine_and_is_the_cpu_default(mirrored):
    model, folder = mirrored
    module = load_partitioned_module(folder, route=EVALUATOR_ROUTE)
    torch.testing.assert_close(module(_x(2)), model(_x(2)), **TOLERANCE)
    assert trt_double.NETWORK_RUNS == [] and module.trtforge_route == EVALUATOR_ROUTE
    if not torch.cuda.is_available():
        assert load_partitioned_module(folder).trtforge_route == EVALUATOR_ROUTE


def test_a_route_partitions_do_not_run_on_is_one_line(compiled):
    _model, art = compiled
    with pytest.raises(InvalidArgument, match=f"route='onnxruntime'.*{PARTITION_ROUTES[0]!r} or 'evaluator'"):
        art.load(route="onnxruntime")
    with pytest.raises(InvalidArgument, match="takes no device= or options"):
        art.load(route=EVALUATOR_ROUTE, device="cuda:0")


@pytest.mark.slow
def test_the_tensorrt_route_refuses_engine_parts_that_were_never_built(tmp_path, fake_trt):
    from trtforge.convert.saved import save_partitioned

    module, report = partition(conv_jiggle_head(), (_x(2),), batch=(1, 2, 4), min_block_size=2, build=False)
    save_partitioned(tmp_path / "unbuilt", module, report)
    with pytest.raises(InvalidArgument, match="has no built engine.*route='evaluator'"):
        load_partitioned_module(tmp_path / "unbuilt", route="tensorrt", bindings=fake_trt.bindings, devices=FAKE_CUDA)
    assert load_partitioned_module(tmp_path / "unbuilt", route=EVALUATOR_ROUTE).trtforge_route == EVALUATOR_ROUTE
