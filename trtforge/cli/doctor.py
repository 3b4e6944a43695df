"""``trtforge doctor [ARTIFACT] [--json]``: this machine's GPUs and toolchain, and whether an engine runs here.

Example:
    $ trtforge doctor
    $ trtforge doctor out/efficientnet_lite0_fp16.json --json
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from trtforge.cli.app import EXIT_FAILED, app, console, guarded


@app.command()
@guarded
def doctor(
    artifact: Annotated[Path | None, typer.Argument(help="an .engine or its .json sidecar to check against this machine")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the facts and verdicts as JSON")] = False,
) -> None:
    """Python, torch, CUDA, GPUs, TensorRT flavours, ONNX Runtime; with ARTIFACT: can it run here?

    Exit 1 when ARTIFACT cannot run on this machine.
    """
    from trtforge.debug.doctor import artifact_verdict, capability_lines, gather_facts, gpu_support

    sidecar = None
    if artifact is not None:
        from trtforge.core.sidecar import read_sidecar

        sidecar = read_sidecar(artifact)  # a wrong path is refused before the machine is read
    facts = gather_facts()
    support = gpu_support(facts)
    verdict = artifact_verdict(facts, sidecar.builder) if sidecar is not None else None
    if as_json:
        data = {"machine": facts.as_dict(), "gpus": [{"index": s.gpu.index, "cc": s.gpu.cc, "tensorrt_rtx_runs": s.rtx,
                                                      "full_tensorrt_present": s.full_installed, "line": s.line}
                                                     for s in support], "capability": capability_lines(facts)}
        if verdict is not None:
            data["artifact"] = {"path": str(sidecar.path), "runs": verdict.runs, "gpu": verdict.gpu, "line": verdict.line}
        print(json.dumps(data, indent=2))
    else:
        _print(facts, support)
        if verdict is not None:
            colour = "green" if verdict.runs else "red"
            console.print(f"[bold {colour}]{escape(sidecar.name)}: {escape(verdict.line)}[/]", soft_wrap=True)
    if verdict is not None and not verdict.runs:
        raise typer.Exit(EXIT_FAILED)


def _print(facts, support) -> None:
    table = Table(title="trtforge doctor", show_header=False)
    table.add_row("python", f"{facts.python} ({facts.platform})")
    table.add_row("torch", f"{facts.torch or 'not installed'}" + (f", CUDA {facts.torch_cuda}" if facts.torch_cuda
                                                                   else " (CPU build)" if facts.torch else ""))
    table.add_row("driver", f"{facts.driver or '-'}" + (f", CUDA driver API {facts.cuda_driver}" if facts.cuda_driver
                                                       else " (no CUDA driver)"))
    for flavour in facts.flavours:
        table.add_row(flavour.name, escape(flavour.version or f"not importable ({flavour.problem})"))
    table.add_row("onnxruntime", f"{facts.onnxruntime or 'not installed'}"
                  + (f": {', '.join(facts.ort_providers)}" if facts.ort_providers else ""))
    if not support:
        table.add_row("GPUs", "none found: TensorRT engines cannot run here (the onnxruntime and eager routes can)")
    for row in support:
        table.add_row(f"GPU {row.gpu.index}", escape(row.line.split(": ", 1)[1] if ": " in row.line else row.line))
        table.add_row("", f"{row.gpu.name}, {row.gpu.cc}" + (f", {row.gpu.memory_mib} MiB" if row.gpu.memory_mib else ""))
    console.print(table)
    from trtforge.debug.doctor import capability_lines

    lines = capability_lines(facts)
    if lines:
        precisions = Table(title="which precision runs as what on each GPU (trtforge/builder/capability.py)")
        for col in ("GPU, flavour", "convolutions", "GEMM / MatMul", "pays off"):
            precisions.add_column(col)
        for line in lines:
            head, rest = line.split(": ", 1)
            cells = [part.split(" ", 1)[-1] for part in rest.split(" | ")] if " | " in rest else [rest]
            precisions.add_row(escape(head), *(escape(c) for c in cells + [""] * (3 - len(cells))))
        console.print(precisions)
