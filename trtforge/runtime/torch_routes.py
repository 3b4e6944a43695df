"""PyTorch routes behind the ``Engine`` protocol: eager FP32, FP16, CUDA graph FP16, compiled.

| route | what runs | needs |
|---|---|---|
| ``eager`` | the module in FP32 | torch (CPU or GPU) |
| ``fp16`` | a FP16 copy of the module (channels-last on the GPU) | a GPU for speed; runs on CPU |
| ``cuda_graph`` | the FP16 module captured once per input shape, replayed | a CUDA GPU (on CPU: plain FP16) |
| ``compiled`` | ``torch.compile(mode="max-autotune")`` in FP16, or an AOTInductor ``.pt2`` | a C++ compiler; Triton on GPU |

Inputs and outputs keep the spec dtypes (FP32 I/O); the casts run inside the route (inside the
graph for ``cuda_graph``). With no GPU every route runs on the CPU. Shape-tensor inputs the sidecar
records reach the module as CPU integer tensors of their values (never cast, never moved to the GPU:
shapes are host values), from a list, a numpy array or a tensor on any device, or left out for the
recorded values; ``cuda_graph`` captures one graph per input shapes and values. An artifact built with
``postprocess=trtforge.NMS(...)`` gets the same fixed-shape NMS after the module (``runtime.torch_nms``, FP32
at every route's precision): ``cuda_graph`` captures model and NMS as one graph, ``compiled`` compiles both.

Example:
    >>> engine = TorchEngine(efficientnet_lite0(), [TensorSpec("images", "float32", (-1, 3, 224, 224))],
    ...                      ["logits"], route="cuda_graph")
    >>> engine(torch.rand(8, 3, 224, 224, device="cuda"))["logits"].shape   # captured for batch 8
    torch.Size([8, 1000])
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from trtforge.core.errors import InvalidArgument, MissingFile
from trtforge.core.postprocess import NMS
from trtforge.core.routes import ROUTE_PRECISION, TORCH_ROUTES
from trtforge.core.sidecar import Sidecar
from trtforge.core.specs import TensorSpec
from trtforge.runtime.aot_probe import check_aot_package
from trtforge.runtime.cuda_graph import GraphCache
from trtforge.runtime.placement import default_device, on_device
from trtforge.runtime.profiles import choose_profile
from trtforge.runtime.protocol import EngineBase, Profiles
from trtforge.runtime.tensors import bind_inputs, torch_dtype


@dataclass(frozen=True)
class TorchRoutePlan:
    """What a PyTorch route does on a device, decided once at load."""

    route: str
    device: torch.device
    compute_dtype: torch.dtype
    channels_last: bool
    cuda_graphs: bool
    compile_mode: str | None

    @property
    def precision(self) -> str:
        return {torch.float32: "fp32", torch.float16: "fp16"}[self.compute_dtype]


def plan_torch_route(route: str, device: torch.device, compile_mode: str = "max-autotune") -> TorchRoutePlan:
    """Decide dtype, layout, graphs and compilation for ``route`` on ``device``."""
    if route not in TORCH_ROUTES:
        raise InvalidArgument(f"unknown PyTorch route {route!r}; choose one of {TORCH_ROUTES}")
    gpu = device.type == "cuda"
    # Inductor on the CPU has poor FP16 kernels: the compiled route stays FP32 there.
    half = ROUTE_PRECISION[route] == "fp16" and (route != "compiled" or gpu)
    return TorchRoutePlan(
        route=route,
        device=device,
        compute_dtype=torch.float16 if half else torch.float32,
        channels_last=half and gpu,
        cuda_graphs=route == "cuda_graph" and gpu,
        compile_mode=compile_mode if route == "compiled" else None,
    )


def _with_postprocess(forward: Any, postprocess: NMS | None) -> Any:
    """``forward`` followed by the fixed-shape NMS in FP32 (``runtime.torch_nms``) when the artifact was built
    with one (``postprocess=trtforge.NMS(...)``): one program, which ``cuda_graph`` captures whole."""
    if postprocess is None:
        return forward
    from trtforge.runtime.torch_nms import WithNMS

    return WithNMS(forward, postprocess)


def _as_tuple(out: Any) -> tuple[torch.Tensor, ...]:
    if isinstance(out, torch.Tensor):
        return (out,)
    if isinstance(out, dict):
        return tuple(out.values())
    return tuple(out)


class TorchEngine(EngineBase):
    """A ``nn.Module`` (or an AOTInductor package) behind the ``Engine`` protocol."""

    def __init__(
        self,
        module: nn.Module | None,
        inputs: Sequence[TensorSpec],
        outputs: Sequence[TensorSpec | str] | None = None,
        *,
        route: str = "eager",
        device: str | torch.device | None = None,
        profiles: Profiles = (),
        compile_mode: str = "max-autotune",
        aot_package: str | Path | None = None,
        aot_probe: bool = True,
        sidecar: Sidecar | None = None,
        move_inputs: bool = False,
        postprocess: NMS | None = None,
    ) -> None:
        self.sidecar = sidecar
        self._device = default_device(device)
        self.move_inputs = move_inputs
        self.plan = plan_torch_route(route, self._device, compile_mode)
        if aot_package is not None:  # the package fixed its own layout when it was compiled
            self.plan = replace(self.plan, channels_last=False, compile_mode=None)
        self.route = route
        self.inputs = tuple(inputs)
        self.profiles = tuple(profiles)
        names = outputs if outputs is not None else getattr(module, "output_names", None) or ("output",)
        self.outputs = tuple(
            n if isinstance(n, TensorSpec) else TensorSpec(str(n), "float32", ()) for n in names
        )
        self._out_dtypes = tuple(torch_dtype(s.dtype) for s in self.outputs)
        self._graphs = GraphCache(self._device) if self.plan.cuda_graphs else None
        self._statics: dict[tuple, list[torch.Tensor]] = {}
        self.aot_package = Path(aot_package) if aot_package is not None else None
        if self.aot_package is not None:
            if route != "compiled":
                raise InvalidArgument("an AOTInductor package runs on route='compiled' only")
            self._module = None
            self._forward = _with_postprocess(_load_aot_package(self.aot_package, self._device, probe=aot_probe),
                                              postprocess)
        else:
            if module is None:
                raise InvalidArgument("a PyTorch route needs the model: pass module=, or an aot_package= for 'compiled'")
            self._module = self._prepare(module)
            self._forward = _with_postprocess(self._module, postprocess)
            if self.plan.compile_mode is not None:  # model and NMS compiled as one program
                self._forward = torch.compile(self._forward, mode=self.plan.compile_mode, dynamic=False)

    # -- setup ----------------------------------------------------------------------------
    def _prepare(self, module: nn.Module) -> nn.Module:
        module = copy.deepcopy(module).eval()  # never change the caller's model in place
        with on_device(self._device):
            module = module.to(device=self._device, dtype=self.plan.compute_dtype)
        if self.plan.channels_last:
            module = module.to(memory_format=torch.channels_last)
        for parameter in module.parameters():
            parameter.requires_grad_(False)
        return module

    @property
    def device(self) -> torch.device:
        return self._device

    @property
    def precision(self) -> str:
        return self.plan.precision

    @property
    def cuda_graph(self) -> bool:
        """Whether calls replay CUDA graphs (route ``cuda_graph`` on a GPU)."""
        return self.plan.cuda_graphs

    @property
    def compute_format(self) -> tuple[torch.dtype, bool]:
        """(dtype, channels_last) that ``capturable_forward`` turns float inputs into; a producer
        that writes this format directly saves the conversion."""
        return self.plan.compute_dtype, self.plan.channels_last

    # -- calls ----------------------------------------------------------------------------
    def capturable_forward(self, *tensors: torch.Tensor) -> dict[str, torch.Tensor]:
        """Cast, run and cast back, with no copies, checks or graphs: safe inside an outer capture.

        The predictor captures preprocessing + this + decoding as one CUDA graph.
        """
        args = []
        for x in tensors:
            if x.is_floating_point():
                x = x.to(self.plan.compute_dtype)
                if self.plan.channels_last and x.dim() == 4:
                    x = x.contiguous(memory_format=torch.channels_last)
            args.append(x)
        with torch.inference_mode():
            raw = _as_tuple(self._forward(*args))
        if len(raw) != len(self.outputs):
            raise InvalidArgument(
                f"the model returned {len(raw)} outputs, the engine names {len(self.outputs)} "
                f"({[s.name for s in self.outputs]}); pass outputs= with one name per output"
            )
        return {
            spec.name: y.to(dtype).contiguous()
            for spec, y, dtype in zip(self.outputs, raw, self._out_dtypes, strict=True)
        }

    def __call__(self, *tensors: Any, **named: Any) -> dict[str, torch.Tensor]:
        self._check_open()
        values = self._arrange(tensors, named)
        shaped = self.recorded_shape_values()
        bound = [torch.from_numpy(v) if isinstance(v, np.ndarray) else v  # shape values stay on the host
                 for v in bind_inputs(self.inputs, values, self._device, self.move_inputs, shaped)]
        choose_profile(self.profiles, {s.name: tuple(t.shape) for s, t in zip(self.inputs, bound, strict=True)})
        with on_device(self._device):  # every allocation, stream and graph of the call on the engine's device
            return self._run(bound, shaped)

    def _run(self, bound: list[torch.Tensor], shaped: Collection[str]) -> dict[str, torch.Tensor]:
        if self._graphs is None:
            return self.capturable_forward(*bound)
        key = tuple((tuple(t.shape), tuple(t.tolist()) if s.name in shaped else None)
                    for s, t in zip(self.inputs, bound, strict=True))
        statics = self._statics.get(key)
        if statics is None:
            statics = [torch.empty_like(t) for t in bound]
            self._statics[key] = statics
        for static, tensor in zip(statics, bound, strict=True):
            if static.data_ptr() != tensor.data_ptr():
                static.copy_(tensor, non_blocking=True)
        return self._graphs.replay(key, lambda: self.capturable_forward(*statics))

    @property
    def graph_captures(self) -> int:
        """How many CUDA graphs this engine captured (one per input shape)."""
        return self._graphs.captures if self._graphs is not None else 0

    def close(self) -> None:
        """Drop graphs, static buffers and the module copy (idempotent)."""
        if self._graphs is not None:
            self._graphs.clear()
        self._statics.clear()
        self._module = None
        self._forward = None
        self._closed = True


# -- AOTInductor ------------------------------------------------------------------------------
def _load_aot_package(path: Path, device: torch.device, probe: bool = True) -> Callable[..., Any]:
    """Load the package here, after a child process loaded it cleanly (``probe``; see aot_probe)."""
    if not path.is_file():
        raise MissingFile(f"no AOTInductor package at {path}; write one with export_aot_package")
    from torch._inductor import aoti_load_package

    if probe:
        check_aot_package(path, device)

    with on_device(device):
        return aoti_load_package(str(path))


def export_aot_package(
    module: nn.Module,
    inputs: Sequence[TensorSpec],
    path: str | Path,
    *,
    device: str | torch.device | None = None,
    batch: tuple[int, int] = (1, 8),
) -> Path:
    """Compile ``module`` ahead of time into an AOTInductor package (``.pt2``) at ``path``.

    The package runs later with ``TorchEngine(None, inputs, outputs, route="compiled",
    aot_package=path)``, without the model's Python code. Dynamic batch over ``batch``
    (inclusive); the other dims come from ``inputs``. FP16 on a GPU, FP32 on the CPU. Example:
        >>> export_aot_package(efficientnet_lite0(), specs, "out/lite0_aot_cuda.pt2", batch=(1, 8))
    """
    from torch._inductor import aoti_compile_and_package

    device = default_device(device)
    dtype = plan_torch_route("compiled", device).compute_dtype
    model = copy.deepcopy(module).eval().to(device=device, dtype=dtype)
    lo, hi = batch
    example = []
    for spec in inputs:
        shape = [max(lo, 2) if d < 0 and i == 0 else d for i, d in enumerate(spec.shape)]
        if any(d < 0 for d in shape):
            raise InvalidArgument(f"input {spec.name!r} {list(spec.shape)}: only the batch axis may be dynamic")
        example.append(torch.rand(shape, device=device).to(torch_dtype(spec.dtype)).to(dtype))
    batch_dim = torch.export.Dim("batch", min=lo, max=hi) if lo != hi else None
    dynamic = tuple({0: batch_dim} if batch_dim is not None and spec.shape[0] < 0 else {} for spec in inputs)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with on_device(device):
        with torch.inference_mode(False), torch.no_grad():
            program = torch.export.export(model, tuple(example), dynamic_shapes=dynamic)
        return Path(aoti_compile_and_package(program, package_path=str(path)))
