"""The base of a ``tune`` run: the sidecar the PyTorch routes load, what the FP32 reference is, the model's identity
and its task.

When the sweep builds (the onnxruntime or TensorRT route is asked for), the base is the first precision's build
through the engine cache: its FP32 reference graph runs in ONNX Runtime. When only PyTorch routes are swept (an H200,
where TensorRT-RTX does not run and may not be installed), nothing is built: the base is a sidecar of the module
beside a placeholder engine file (as ``bench`` writes for zoo models), and the reference is the PyTorch model in FP32
on the CPU (as ``check`` judges a direct-path artifact).

Example:
    >>> base = torch_base(subject, Path("tuned"))
    >>> base.sidecar_path.name, base.torch_reference
    ('efficientnet_lite0_torch.json', True)
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from trtforge.core.routes import ENGINE_ROUTES
from trtforge.tuning.candidates import ENGINE_ROUTE, DeviceFacts, SweepPlan
from trtforge.tuning.subject import Subject

#: The note a PyTorch-only base's sidecar carries: its engine file holds no engine.
PLACEHOLDER_NOTE = ("trtforge tune measured the PyTorch routes only: the engine file is a placeholder; "
                    "build the model for the tensorrt route")


@dataclass(frozen=True)
class Base:
    """The sidecar the PyTorch routes load; the model's identity (its FP32 reference graph's sha256, or its
    weights' for a PyTorch-only run); the task; whether the FP32 reference is the PyTorch model."""

    sidecar_path: Path
    model_sha256: str
    task: str
    torch_reference: bool = False


def needs_build(plan: SweepPlan, facts: DeviceFacts) -> bool:
    """True when a swept route runs built files, or engines are built here to show they build."""
    return (any(c.route in ENGINE_ROUTES for c in plan.candidates)
            or (bool(facts.flavour) and any(s.route == ENGINE_ROUTE for s in plan.skipped)))


def built_base(artifact: Any) -> Base:
    """The base of a run that builds: the first build (``trtforge.Artifact``)."""
    from trtforge.debug.check import artifact_task

    sidecar = artifact.sidecar
    return Base(artifact.sidecar_path, sidecar.source.reference_onnx_sha256,
                artifact_task(sidecar, artifact.reference_onnx_path))


def model_sha256(model: Any) -> str:
    """The module's class and weights (every parameter and buffer, by name), hashed."""
    import torch

    digest = hashlib.sha256(type(model).__qualname__.encode())
    for name, tensor in sorted(model.state_dict().items()):
        array = tensor.detach().cpu().contiguous().reshape(-1)
        digest.update(f"{name}:{array.dtype}:{tuple(tensor.shape)}".encode())
        digest.update(array.view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def _output_specs(subject: Subject) -> tuple[Any, list[np.ndarray]]:
    """The module's output specs (dim 0 dynamic) and its outputs on one sample, in FP32 on the CPU."""
    import torch

    from trtforge.core.specs import TensorSpec

    with torch.inference_mode():
        result = subject.model(*(torch.from_numpy(np.ascontiguousarray(subject.data[n][:1]))
                                 for n in subject.input_names))
    values = list(result.values()) if isinstance(result, dict) else list(result) if isinstance(
        result, (tuple, list)) else [result]
    names = (list(result) if isinstance(result, dict) else list(getattr(subject.model, "trtforge_output_names", ()))
             or [f"output_{i}" if i else "output" for i in range(len(values))])
    arrays = [v.detach().float().numpy() for v in values]
    specs = tuple(TensorSpec(n, str(v.dtype).removeprefix("torch."), (-1, *v.shape[1:])) for n, v in
                  zip(names, values, strict=True))
    return specs, arrays


def torch_base(subject: Subject, folder: Path) -> Base:
    """A sidecar of the module beside a placeholder engine (nothing is built), for a PyTorch-only sweep."""
    from trtforge.core.hashing import sha256_file
    from trtforge.core.sidecar import Sidecar, write_sidecar
    from trtforge.core.specs import TensorSpec
    from trtforge.quantize.task import task_of_outputs

    outputs, values = _output_specs(subject)
    inputs = tuple(TensorSpec(n, subject.data[n].dtype.name, (-1, *subject.data[n].shape[1:]))
                   for n in subject.input_names)
    engine = folder / f"{subject.name}_torch.engine"
    engine.write_bytes(b"placeholder: trtforge tune measured the PyTorch routes, which never read the engine\n")
    factory = getattr(subject.model, "trtforge_factory", None)
    sidecar = Sidecar(name=f"{subject.name}_torch", engine_file=engine.name, engine_size=engine.stat().st_size,
                      engine_sha256=sha256_file(engine), inputs=inputs, outputs=outputs, profiles=(),
                      precision={"built": "fp32"}, builder={},
                      source={"kind": "torch", "factory": factory, "module": type(subject.model).__name__},
                      preprocessing=subject.preprocessing, notes=(PLACEHOLDER_NOTE,))
    path = write_sidecar(folder / f"{subject.name}_torch.json", sidecar)
    task = task_of_outputs([subject.data[n][:1] for n in subject.input_names], values)
    return Base(path, model_sha256(subject.model), task, torch_reference=True)
