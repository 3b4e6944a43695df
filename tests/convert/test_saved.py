"""A partitioned module saves as a folder (engines + sidecars + records + exported program) and loads
back into a module that matches PyTorch on the CPU (engine parts through the reference evaluator)."""

from __future__ import annotations

import json

import pytest
import torch
from custom_op_model import conv_jiggle_head

from trtforge.convert.partition import EngineModule, partition
from trtforge.convert.saved import load_partitioned, save_partitioned
from trtforge.core.errors import FileConflict, InvalidArgument
from trtforge.core.sidecar import EngineHashMismatch, read_sidecar

pytestmark = pytest.mark.needs_trt


def _x(b: int) -> torch.Tensor:
    return torch.randn(b, 3, 8, 8, generator=torch.Generator().manual_seed(b))


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    model = conv_jiggle_head()
    module, report = partition(model, (_x(2),), batch=(1, 2, 4), min_block_size=2)
    folder = tmp_path_factory.mktemp("partitioned") / "model"
    save_partitioned(folder, module, report)
    return model, module, report, folder


@pytest.mark.slow
def test_folder_holds_engines_sidecars_records_and_the_program(saved):
    _model, module, report, folder = saved
    assert len(report.engines) == 2
    names = sorted(p.name for p in folder.iterdir())
    assert "program.pt2" in names and "manifest.json" in names
    for name in report.engines:
        assert {f"{name}.engine", f"{name}.json", f"{name}.record.pt"} <= set(names)
        sidecar = read_sidecar(folder / f"{name}.json")
        sidecar.verify_engine()
        engine = getattr(module, name)
        assert sidecar.engine_path.read_bytes() == engine.plan
        assert [s.name for s in sidecar.inputs] == engine.input_names
        assert sidecar.source.path == "direct" and sidecar.builder.converter_hash
        assert all(s.shape[0] == -1 for s in sidecar.outputs)
        (profile,) = sidecar.profiles
        assert all(r["max"][0] == 4 and r["min"][0] == 1 for r in profile.values())
    assert json.loads((folder / "manifest.json").read_text())["min_block_size"] == 2


@pytest.mark.slow
def test_loaded_module_matches_pytorch_and_the_saved_one(saved):
    model, module, _report, folder = saved
    loaded, report = load_partitioned(folder)
    engines = [m for m in loaded.modules() if isinstance(m, EngineModule)]
    assert len(engines) == 2 and all(e.plan for e in engines)
    assert "jiggle" in loaded.code  # the custom op runs in PyTorch, from the exported program
    for batch in (1, 3):
        torch.testing.assert_close(loaded(_x(batch)), model(_x(batch)), rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(loaded(_x(batch)), module(_x(batch)))


def test_a_changed_engine_is_refused_on_load(saved, tmp_path):
    _model, _module, report, folder = saved
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    engine = copy / f"{next(iter(report.engines))}.engine"
    engine.write_bytes(engine.read_bytes()[:-4])
    with pytest.raises(EngineHashMismatch, match="does not match its sidecar"):
        load_partitioned(copy)


def test_saving_into_a_foreign_folder_and_loading_a_plain_one_are_refused(saved, tmp_path):
    _model, module, report, _folder = saved
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(FileConflict, match="did not write"):
        save_partitioned(tmp_path, module, report)
    with pytest.raises(FileNotFoundError, match="no manifest.json"):
        load_partitioned(tmp_path)
    (tmp_path / "manifest.json").write_text("{}")
    with pytest.raises(InvalidArgument, match="not a trtforge partitioned-module manifest"):
        load_partitioned(tmp_path)
