"""The ONNX Runtime route: the reference that runs anywhere (CPU, or the CUDA provider if present).

Inputs go through the same checks as every route; outputs come back as torch tensors on the
engine's device (the CPU with the CPU provider). Shape-tensor inputs the sidecar records (values that
set shapes) are fed as host arrays of their values, from a list, a numpy array or a torch tensor on
any device, or left out for the recorded values.

Example:
    >>> engine = OnnxRuntimeEngine("out/efficientnet_lite0_fp32.onnx")
    >>> engine(np.zeros((1, 3, 224, 224), np.float32))["logits"].shape
    torch.Size([1, 1000])
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from trtforge.core.bf16_emulation import ort_source
from trtforge.core.errors import InvalidArgument, MissingFile, WrongType
from trtforge.core.ort_session import session
from trtforge.core.sidecar import Sidecar
from trtforge.core.specs import TensorSpec
from trtforge.runtime.placement import default_device
from trtforge.runtime.profiles import choose_profile
from trtforge.runtime.protocol import EngineBase, Profiles
from trtforge.runtime.tensors import bind_input, shape_values

#: ONNX Runtime type strings → spec dtype names.
ORT_DTYPES: dict[str, str] = {
    "tensor(float)": "float32", "tensor(float16)": "float16", "tensor(double)": "float64",
    "tensor(int8)": "int8", "tensor(uint8)": "uint8", "tensor(int32)": "int32",
    "tensor(int64)": "int64", "tensor(bool)": "bool",
}


def _spec(arg: Any) -> TensorSpec:
    if arg.type not in ORT_DTYPES:
        raise WrongType(f"ONNX tensor {arg.name!r} has type {arg.type}, which this route cannot pass")
    shape = tuple(d if isinstance(d, int) and d >= 0 else -1 for d in arg.shape)
    return TensorSpec(arg.name, ORT_DTYPES[arg.type], shape)


class OnnxRuntimeEngine(EngineBase):
    """An ONNX file run by ONNX Runtime, behind the ``Engine`` protocol."""

    route = "onnxruntime"
    #: What runs the graph when not ONNX Runtime on the file as it is (a BF16 graph: ``bf16_emulation.EMULATED``).
    evaluator: str | None = None

    def __init__(
        self,
        onnx_path: str | Path,
        device: str | torch.device | None = None,
        *,
        profiles: Profiles = (),
        threads: int | None = None,
        sidecar: Sidecar | None = None,
        move_inputs: bool = False,
    ) -> None:
        import onnxruntime as ort

        self.sidecar = sidecar
        self.move_inputs = move_inputs
        onnx_path = Path(onnx_path)
        if not onnx_path.is_file():
            found = "a folder" if onnx_path.is_dir() else "nothing"
            raise MissingFile(
                f"no ONNX file at {onnx_path} ({found} there); pass the path of an existing .onnx file, or load the "
                "artifact's sidecar instead: trtforge.load('out/model.json', route='onnxruntime') runs the ONNX files "
                "trtforge.compile wrote beside the engine")
        want = default_device(device if device is not None else "cpu")  # index filled, range checked
        providers = ["CPUExecutionProvider"]
        if want.type == "cuda":
            if "CUDAExecutionProvider" not in ort.get_available_providers():
                raise InvalidArgument(
                    f"device {want} asked for, but this onnxruntime has no CUDA provider "
                    f"({ort.get_available_providers()}); use device='cpu' or install onnxruntime-gpu"
                )
            providers = [("CUDAExecutionProvider", {"device_id": want.index}), "CPUExecutionProvider"]
        # Through the project's session factory: it disables the ORT optimisers that break our graphs.
        # A BF16 graph runs as its emulation graph (FP32 compute, BF16 storage): ORT has no BF16 Conv/MatMul.
        source, self.evaluator = ort_source(onnx_path)
        self._session = session(source, providers=providers, threads=threads)
        self._device = want
        self.onnx_path = onnx_path
        self.inputs = tuple(_spec(a) for a in self._session.get_inputs())
        self.outputs = tuple(_spec(a) for a in self._session.get_outputs())
        self.profiles = tuple(profiles)

    @property
    def device(self) -> torch.device:
        return self._device

    @property
    def providers(self) -> list[str]:
        return self._session.get_providers()

    def __call__(self, *tensors: Any, **named: Any) -> dict[str, torch.Tensor]:
        self._check_open()
        values = self._arrange(tensors, named)
        feeds: dict[str, np.ndarray] = {}
        host = torch.device("cpu")
        shaped = self.recorded_shape_values()
        for spec, value in zip(self.inputs, values, strict=True):
            if spec.name in shaped:  # values read on the host wherever they come from
                feeds[spec.name] = shape_values(spec, value)
                continue
            # ONNX Runtime is fed from host memory; a device tensor must be on the engine's device.
            on_device = isinstance(value, torch.Tensor) and value.device.type != "cpu"
            bound = bind_input(spec, value, self._device if on_device else host, self.move_inputs)
            feeds[spec.name] = bound.cpu().numpy()
        choose_profile(self.profiles, {k: v.shape for k, v in feeds.items()})
        results = self._session.run([s.name for s in self.outputs], feeds)
        return {s.name: torch.from_numpy(r).to(self._device) for s, r in zip(self.outputs, results, strict=True)}

    def close(self) -> None:
        self._session = None
        self._closed = True
