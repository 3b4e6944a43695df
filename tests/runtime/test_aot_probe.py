"""The AOTInductor probe: a package is loaded in a child process first, and a crash there is a clear error here.

The crash is real: the child below kills itself with SIGSEGV, which is how ``aoti_load_package``
ended on the lent H200 (docs/benchmarks.md). This process survives it and reports it.
"""

from __future__ import annotations

import signal
import sys

import pytest
import torch

from trtforge.core.specs import TensorSpec
from trtforge.runtime import aot_probe
from trtforge.runtime.aot_probe import AotPackageError, ProbeResult, check_aot_package, run_probe
from trtforge.runtime.torch_routes import TorchEngine

SEGFAULTING_CHILD = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"]


def test_probe_result_names_the_signal_or_status():
    assert ProbeResult(-int(signal.SIGSEGV), "").describe() == "killed by SIGSEGV"
    assert ProbeResult(1, "").describe() == "exited with status 1"
    assert ProbeResult(0, "").ok and not ProbeResult(1, "").ok


def test_a_child_killed_by_sigsegv_is_reported_not_shared():
    result = run_probe(SEGFAULTING_CHILD, timeout=60)
    assert result.returncode == -int(signal.SIGSEGV) and result.describe() == "killed by SIGSEGV"


def test_a_crashing_package_is_refused_before_this_process_loads_it(tmp_path, monkeypatch):
    package = tmp_path / "crashes_aot_cpu.pt2"
    package.write_bytes(b"stands for a package whose loader segfaults")
    monkeypatch.setattr(aot_probe, "probe_command", lambda path, device: SEGFAULTING_CHILD)
    spec = TensorSpec("x", "float32", (-1, 8))
    with pytest.raises(AotPackageError, match=r"killed by SIGSEGV .*aot_package=False"):
        TorchEngine(None, [spec], ["y"], route="compiled", device="cpu", aot_package=package)


@pytest.mark.slow
def test_a_file_that_is_not_a_package_fails_in_the_child_with_its_error(tmp_path):
    package = tmp_path / "not_a_package_aot_cpu.pt2"
    package.write_bytes(b"not a zip archive")
    with pytest.raises(AotPackageError, match=r"exited with status 1 .*Child's last lines: .*") as info:
        check_aot_package(package, torch.device("cpu"))
    assert str(package) in str(info.value)


@pytest.mark.slow
@pytest.mark.xdist_group("compiled_route")  # with the route tests that wait for the run's package (aot_mlp)
def test_a_good_package_is_probed_once_per_process(monkeypatch, aot_mlp):
    model, spec, package = aot_mlp
    aot_probe._probed.cache_clear()  # whatever this process probed before: the run's package is probed afresh
    calls = []
    real = aot_probe.run_probe
    monkeypatch.setattr(aot_probe, "run_probe", lambda command, timeout=300.0: calls.append(command) or real(command))
    for _ in range(2):
        with TorchEngine(None, [spec], ["y"], route="compiled", device="cpu", aot_package=package) as engine:
            x = torch.randn(3, 8)
            torch.testing.assert_close(engine(x)["y"], model(x).detach(), rtol=1e-5, atol=1e-5)
    assert len(calls) == 1 and calls[0][-2:] == [str(package.resolve()), "cpu"]
