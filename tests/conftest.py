"""Shared fixtures: real models and data (exported once per test run), the tiny model, the doubles.

Tests mirror the package folders (tests/core, tests/passes, ...); the TensorRT and refit doubles and the
tiny model live in tests/doubles, helpers that are no doubles (the in-process CLI) in tests/support; both are
importable by name.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

if os.environ.get("PYTEST_XDIST_WORKER") and "OMP_NUM_THREADS" not in os.environ:
    # Two workers on two cores: each computes on one thread (PyTorch reads this at import, trtforge's ONNX Runtime
    # sessions per session, the CLI processes a test starts inherit it). Two threads a worker oversubscribed the
    # cores: tests/quantize + tests/debug took 151 s wall and 284 CPU s with two, 132 s and 247 CPU s with one.
    os.environ["OMP_NUM_THREADS"] = "1"

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent / "doubles"))
sys.path.insert(0, str(Path(__file__).parent / "support"))

from tiny_model import TinyNet, export_tiny  # noqa: E402

from trtforge.capture.export import export_onnx  # noqa: E402
from trtforge.core import trt  # noqa: E402
from trtforge.core.hashing import sha256_file  # noqa: E402
from trtforge.core.sidecar import Sidecar, write_sidecar  # noqa: E402
from trtforge.core.specs import TensorSpec  # noqa: E402
from trtforge.passes.cleanup import cleanup  # noqa: E402
from trtforge.passes.graph import load_ir, save_model  # noqa: E402

logging.getLogger("torch.onnx").setLevel(logging.ERROR)


def run_folder(tmp_path_factory) -> Path:
    """The folder this test run owns: pytest's base temp, or its parent, which the workers of one ``-n 2`` run
    share (each worker's base temp is ``popen-gwN`` inside it)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def shared_file(tmp_path_factory, name: str, make) -> Path:
    """The file ``make(folder)`` writes into ``folder``, made once per run: the workers of one run share it.

    Read-only to the tests that take it (copy it to change it). The first worker makes it under a lock,
    the others wait and reuse it."""
    from filelock import FileLock

    folder = run_folder(tmp_path_factory) / "shared_files" / name
    folder.mkdir(parents=True, exist_ok=True)
    done = folder / "made.txt"
    with FileLock(str(folder) + ".lock"):
        if not done.is_file():
            done.write_text(str(make(folder)))
    return Path(done.read_text())


@pytest.fixture(scope="session")
def engine_store(tmp_path_factory) -> Path:
    """The run's store of built artifacts: the product's own engine cache, in a folder the run owns, shared by
    every test and every worker of the run (the cache is content-addressed and locked, so two workers asking
    for the same build get one). A test that needs "tiny at FP16" builds it with the cache on and gets a hit
    after the first. Tests of the cache itself keep their own folders. Never ``~/.cache/trtforge``."""
    store = run_folder(tmp_path_factory) / "engine_store"
    store.mkdir(exist_ok=True)
    return store


@pytest.fixture(scope="session", autouse=True)
def _isolated_engine_cache(engine_store):
    """Tests never read or write the user's ~/.cache/trtforge: the run's ``engine_store`` is the default cache."""
    previous = os.environ.get("TRTFORGE_CACHE_DIR")
    os.environ["TRTFORGE_CACHE_DIR"] = str(engine_store)
    yield
    if previous is None:
        os.environ.pop("TRTFORGE_CACHE_DIR", None)
    else:
        os.environ["TRTFORGE_CACHE_DIR"] = previous


@pytest.fixture(scope="session", autouse=True)
def _sidecars_match_schema(tmp_path_factory):
    """At the end of the run, every sidecar the tests wrote validates against docs/sidecar.schema.json.

    A sidecar is a ``*.json`` under the run's temporary folders that trtforge's own reader accepts
    (the files tests damage on purpose are refused by it, and are no sidecars trtforge wrote).
    """
    yield
    import json

    import jsonschema

    from trtforge.core.errors import TrtforgeError

    schema = json.loads((Path(__file__).parents[1] / "docs" / "sidecar.schema.json").read_text())
    validator = jsonschema.Draft202012Validator(schema)
    failures = []
    for path in sorted(tmp_path_factory.getbasetemp().rglob("*.json")):
        try:
            data = json.loads(path.read_text())
            if not (isinstance(data, dict) and data.get("generator") == "trtforge"):
                continue
            Sidecar.from_dict(data, path=path)
        except (OSError, ValueError, TrtforgeError):
            continue
        failures += [f"{path}: {'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(data)]
    assert not failures, "sidecars that do not match docs/sidecar.schema.json (regenerate it with " \
        "python -m trtforge.core.sidecar_schema --write, or fix the writer):\n" + "\n".join(failures[:20])


@pytest.fixture(scope="session")
def lite0():
    from trtforge.zoo import efficientnet_lite0

    return efficientnet_lite0()


@pytest.fixture(scope="session")
def lite0_onnx(lite0, tmp_path_factory) -> Path:
    """EfficientNet-Lite0 (real weights) exported with a dynamic batch and cleaned: the FP32 reference."""
    def export(tmp: Path) -> Path:
        raw = export_onnx(lite0, (torch.zeros(1, 3, 224, 224),), tmp / "raw.onnx",
                          input_names=["images"], output_names=["logits"])
        save_model(cleanup(load_ir(raw)), tmp / "efficientnet_lite0.onnx")
        return tmp / "efficientnet_lite0.onnx"

    return shared_file(tmp_path_factory, "lite0", export)


@pytest.fixture(scope="session")
def photo_inputs(lite0) -> np.ndarray:
    """128 real-photo crops from skimage, normalised for EfficientNet-Lite0 (N, 3, 224, 224)."""
    from trtforge.zoo.photos import normalize, photo_crops

    return normalize(photo_crops(128, seed=1), lite0.preprocessing)


@pytest.fixture(scope="session")
def minilm():
    from trtforge.zoo import minilm_l6

    return minilm_l6()


@pytest.fixture(scope="session")
def minilm_onnx(minilm, tmp_path_factory) -> Path:
    model, tokenize = minilm

    def export(tmp: Path) -> Path:
        raw = export_onnx(model, tokenize(["warm up sentence"] * 2, seq_len=32), tmp / "raw.onnx")
        save_model(cleanup(load_ir(raw)), tmp / "minilm.onnx")
        return tmp / "minilm.onnx"

    return shared_file(tmp_path_factory, "minilm", export)


@pytest.fixture(scope="session")
def sentences() -> list[str]:
    """Real English sentences that ship with Python (pydoc help topics)."""
    from trtforge.zoo.texts import sentences as python_sentences

    return python_sentences(48)


LITE0_PROFILE = {"images": {"min": [1, 3, 224, 224], "opt": [4, 3, 224, 224], "max": [8, 3, 224, 224]}}


def pytest_configure(config):
    config.addinivalue_line("markers", "needs_trt: builds real engines with the installed TensorRT bindings")
    from worker_groups import WorkerGroups

    config.pluginmanager.register(WorkerGroups(), "trtforge-worker-groups")
    if os.environ.get("TRTFORGE_SUITE_COST"):  # each test's cost, per worker (tests/support/suite_cost.py)
        from suite_cost import SuiteCost

        config.pluginmanager.register(SuiteCost(Path(os.environ["TRTFORGE_SUITE_COST"])), "trtforge-suite-cost")


def pytest_collection_modifyitems(items):
    """Tests without a TensorRT binding are skipped (xdist's worker groups: tests/support/worker_groups.py)."""
    if not trt.available():
        skip = pytest.mark.skip(reason="no TensorRT bindings installed")
        for item in items:
            if "needs_trt" in item.keywords:
                item.add_marker(skip)


@pytest.fixture(params=["tensorrt10", "tensorrt11", "tensorrt_rtx"])
def fake_trt(request):
    """The TensorRT double as each flavour (full TensorRT 10 without a runtime config, full TensorRT 11,
    TensorRT-RTX): a route test that takes it runs under each (tests/doubles/trt_double.py)."""
    from trt_double import FLAVOURS, FakeTensorRT

    assert request.param in FLAVOURS
    return FakeTensorRT(request.param)


@pytest.fixture
def private_engine_cache(caplog, monkeypatch, tmp_path):
    """INFO logs captured; a test that forgets cache_dir= gets its own engine cache, never ~/.cache."""
    caplog.set_level(logging.INFO, logger="trtforge")
    monkeypatch.setenv("TRTFORGE_CACHE_DIR", str(tmp_path / "default-cache"))
    yield


@pytest.fixture(scope="session")
def tiny_onnx(tmp_path_factory) -> Path:
    """The tiny model as an ONNX file (exported once)."""
    return export_tiny(tmp_path_factory.mktemp("tiny") / "tiny.onnx")


@pytest.fixture
def tiny_module() -> TinyNet:
    torch.manual_seed(0)
    return TinyNet().eval()


def aot_mlp_model() -> torch.nn.Module:
    """The small MLP of ``aot_mlp``'s package, the same weights in every process (seeded, the global RNG left as is)."""
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4)).eval()


@pytest.fixture(scope="session")
def aot_mlp(tmp_path_factory) -> tuple[torch.nn.Module, TensorSpec, Path]:
    """(model, input spec, package): one AOTInductor package (CPU, batch 1..8) of ``aot_mlp_model()``, made once per
    run for the tests that run a package (an AOTInductor export and its C++ compile cost ~11 CPU s each). It is
    ``export_aot_beside``'s: the package lies beside ``aot_mlp_sidecar`` (batch from its profile).
    Read-only: copy it to change it, or to have it probed afresh (the probe is once per path and process)."""
    from trtforge.runtime.load import export_aot_beside

    spec = TensorSpec("x", "float32", (-1, 8))

    def make(folder: Path) -> Path:
        engine = folder / "mlp.engine"
        engine.write_bytes(b"placeholder, not a TensorRT engine")
        sidecar = write_sidecar(folder / "mlp.json", Sidecar(
            name="mlp", engine_file=engine.name, engine_size=engine.stat().st_size, engine_sha256=sha256_file(engine),
            inputs=(spec,), outputs=(TensorSpec("y", "float32", (-1, 4)),),
            profiles=({"x": {"min": [1, 8], "opt": [2, 8], "max": [8, 8]}},), precision={}, builder={},
            source={"kind": "torch"},  # no factory: only the package (or model=) can run it
        ))
        return export_aot_beside(sidecar, "cpu", model=aot_mlp_model())

    return aot_mlp_model(), spec, shared_file(tmp_path_factory, "aot_mlp", make)


@pytest.fixture(scope="session")
def aot_mlp_sidecar(aot_mlp) -> Path:
    """The sidecar ``aot_mlp``'s package was exported beside (``mlp.json``, a placeholder engine, no factory)."""
    return aot_mlp[2].parent / "mlp.json"


@pytest.fixture(scope="session")
def photo_batch() -> np.ndarray:
    """Two real photos (skimage) as the predictor preprocesses them for Lite0: (2, 3, 224, 224) float32."""
    from skimage import data

    from trtforge.core.preprocessing import PreprocessConfig, preprocess_images
    from trtforge.zoo.efficientnet_lite import LITE0_PREPROCESSING

    config = PreprocessConfig.from_dict(LITE0_PREPROCESSING)
    return np.ascontiguousarray(preprocess_images([data.chelsea(), data.astronaut()], config).numpy())


@pytest.fixture(scope="session")
def lite0_sidecar(tmp_path_factory, lite0) -> Path:
    """A sidecar for EfficientNet-Lite0 as the pipeline writes it: FP32 reference ONNX, zoo factory.

    The engine file is a placeholder: no TensorRT engine can run on this machine, and these tests
    exercise the PyTorch and ONNX Runtime routes, which never read it.
    """
    from trtforge.zoo.efficientnet_lite import LITE0_PREPROCESSING

    folder = tmp_path_factory.mktemp("lite0")
    onnx_path = folder / "efficientnet_lite0_fp32.onnx"
    torch.onnx.export(
        lite0, (torch.zeros(1, 3, 224, 224),), str(onnx_path), dynamo=False, input_names=["images"],
        output_names=["logits"], dynamic_axes={"images": {0: "batch"}, "logits": {0: "batch"}},
    )
    engine = folder / "efficientnet_lite0_fp16.engine"
    engine.write_bytes(b"placeholder, not a TensorRT engine")
    sidecar = Sidecar(
        name="efficientnet_lite0_fp16", engine_file=engine.name, engine_size=engine.stat().st_size,
        engine_sha256=sha256_file(engine),
        inputs=(TensorSpec("images", "float32", (-1, 3, 224, 224)),),
        outputs=(TensorSpec("logits", "float32", (-1, 1000)),),
        profiles=(LITE0_PROFILE,), precision={"built": "fp16"}, builder={"flavour": "tensorrt_rtx"},
        source={"kind": "torch", "onnx_file": onnx_path.name, "reference_onnx_file": onnx_path.name,
                "onnx_sha256": sha256_file(onnx_path), "reference_onnx_sha256": sha256_file(onnx_path),
                "factory": "trtforge.zoo:efficientnet_lite0"},
        preprocessing=dict(LITE0_PREPROCESSING),
    )
    return write_sidecar(folder / "efficientnet_lite0_fp16.json", sidecar)
