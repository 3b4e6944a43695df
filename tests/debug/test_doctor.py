"""``trtforge doctor``: the decisions over made-up machines, and the command on this CPU machine."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from typer.testing import CliRunner

from trtforge.cli import app
from trtforge.core.sidecar import BuilderRecord
from trtforge.debug.doctor import (
    Flavour,
    Gpu,
    MachineFacts,
    artifact_verdict,
    capability_lines,
    gather_facts,
    gpu_support,
    torch_cuda_build,
)

runner = CliRunner()
RTX = Flavour("tensorrt_rtx", "1.7.1.116", targets=("sm75", "sm80", "sm86", "sm89", "sm120", "sm121"))
FULL = Flavour("tensorrt", "10.13.0.35", targets=())
NO_FULL = Flavour("tensorrt", problem="No module named 'tensorrt'")
H200 = Gpu(0, "NVIDIA H200", "sm90", 143771)
RTX3090 = Gpu(0, "NVIDIA GeForce RTX 3090", "sm86", 24576)
RTX_ENGINE = BuilderRecord(flavour="tensorrt_rtx", version="1.7.1.116")


def machine(*gpus: Gpu, flavours=(NO_FULL, RTX)) -> MachineFacts:
    return MachineFacts("3.11.7", "Linux x86_64", gpus=gpus, flavours=flavours)


def test_h200_with_only_tensorrt_rtx_cannot_run_and_full_tensorrt_is_the_way():
    facts = machine(H200)
    (row,) = gpu_support(facts)
    assert not row.rtx and not row.full_installed
    assert "TensorRT-RTX cannot run engines here" in row.line and "pip install 'trtforge[tensorrt]'" in row.line
    verdict = artifact_verdict(facts, RTX_ENGINE)
    assert not verdict.runs
    assert verdict.line.startswith("cannot run here: TensorRT-RTX does not run on sm90 (NVIDIA H200)")
    assert "full TensorRT is the way" in verdict.line and "pip install 'trtforge[tensorrt]'" in verdict.line
    assert "\n" not in verdict.line
    # With full TensorRT installed, the fix is a rebuild here.
    with_full = artifact_verdict(machine(H200, flavours=(FULL, RTX)), RTX_ENGINE)
    assert not with_full.runs and "rebuild it here with trtforge build" in with_full.line


def test_sm86_with_rtx_runs_portable_engines_and_names_the_target_to_rebuild_for():
    facts = machine(RTX3090)
    (row,) = gpu_support(facts)
    assert row.rtx and "TensorRT-RTX can run engines here" in row.line
    assert artifact_verdict(facts, RTX_ENGINE).runs
    assert artifact_verdict(facts, RTX_ENGINE).gpu == 0
    only_ada = BuilderRecord(flavour="tensorrt_rtx", version="1.7.1.116", targets=("sm89",))
    verdict = artifact_verdict(facts, only_ada)
    assert not verdict.runs and "rebuild with trtforge build --target sm86" in verdict.line
    other_release = BuilderRecord(flavour="tensorrt_rtx", version="1.5.0.1")
    verdict = artifact_verdict(facts, other_release)
    assert not verdict.runs and "built with TensorRT-RTX 1.5.0.1, installed 1.7.1.116" in verdict.line
    assert artifact_verdict(facts, BuilderRecord(flavour="tensorrt_rtx", version="1.5.0.1",
                                                 version_compatible=True)).runs


def test_turing_needs_an_engine_built_for_it():
    facts = machine(Gpu(0, "Quadro RTX 6000", "sm75"))
    verdict = artifact_verdict(facts, RTX_ENGINE)
    assert not verdict.runs and "--target sm75" in verdict.line


def test_no_gpu_says_where_it_can_run():
    facts = machine()
    assert gpu_support(facts) == []
    verdict = artifact_verdict(facts, RTX_ENGINE)
    assert not verdict.runs and "no CUDA GPU found" in verdict.line and "--route onnxruntime" in verdict.line


def test_full_tensorrt_engines_need_full_tensorrt_of_the_same_release():
    built = BuilderRecord(flavour="tensorrt", version="10.13.0.35", hardware_compatibility="ampere_plus")
    assert not artifact_verdict(machine(H200), built).runs
    assert "pip install 'trtforge[tensorrt]'" in artifact_verdict(machine(H200), built).line
    assert artifact_verdict(machine(H200, flavours=(FULL, RTX)), built).runs
    old = BuilderRecord(flavour="tensorrt", version="10.8.0.1")
    assert "built with TensorRT 10.8.0.1" in artifact_verdict(machine(H200, flavours=(FULL, RTX)), old).line
    turing = artifact_verdict(machine(Gpu(0, "T4", "sm75"), flavours=(FULL, RTX)), built)
    assert not turing.runs and "ampere_plus" in turing.line


def test_facts_of_this_machine_are_read_without_importing_torch():
    code = ("import sys, time; t = time.perf_counter(); from trtforge.debug.doctor import gather_facts; "
            "f = gather_facts(); print('torch' in sys.modules, round(time.perf_counter() - t, 2))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[0] == "False", "doctor imported torch"
    facts = gather_facts()
    import torch

    assert facts.torch == torch.__version__
    assert torch_cuda_build() == torch.version.cuda
    assert facts.gpus == () or all(g.cc.startswith("sm") for g in facts.gpus)


def test_each_local_gpu_gets_its_capability_row_per_flavour():
    rtx_sm86, full_sm86, rtx_h200, full_h200 = capability_lines(machine(RTX3090, Gpu(1, "NVIDIA H200", "sm90")))
    assert rtx_sm86.startswith("GPU 0 (sm86), TensorRT-RTX 1.7.1.116: convolutions FP16/BF16; INT8 weight-only | ")
    assert "GEMM FP16/BF16; INT8 weight-only, INT4 weight-only | --precision int8-wo, int4-wo" in rtx_sm86
    assert full_sm86.startswith("GPU 0 (sm86), full TensorRT 10.8 (not installed): convolutions FP16/BF16; INT8 (W8A8)")
    assert rtx_h200 == "GPU 1 (sm90), TensorRT-RTX 1.7.1.116: TensorRT-RTX does not run on sm90"
    assert "FP8" in full_h200 and "--precision int8, fp8" in full_h200
    assert capability_lines(machine()) == []


def test_doctor_command_on_this_machine(lite0_sidecar):
    start = time.perf_counter()
    result = runner.invoke(app, ["doctor"])
    assert result.exit_code == 0, result.output
    assert "python" in result.output and "tensorrt_rtx" in result.output and "onnxruntime" in result.output
    assert time.perf_counter() - start < 10
    shown = runner.invoke(app, ["doctor", str(lite0_sidecar), "--json"])
    data = json.loads(shown.stdout)
    facts = gather_facts()
    assert data["machine"]["python"] == facts.python
    assert data["artifact"]["runs"] is artifact_verdict(facts, BuilderRecord(flavour="tensorrt_rtx")).runs
    assert shown.exit_code == (0 if data["artifact"]["runs"] else 1)
    missing = runner.invoke(app, ["doctor", "nowhere.json"])
    assert missing.exit_code == 2 and "no sidecar at nowhere.json" in missing.output
