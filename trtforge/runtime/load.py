"""``trtforge.load``: one entry point that returns an ``Engine`` for any route.

The routes, as data (name, what runs, what it needs), are ``trtforge.core.routes.ROUTES``.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trtforge.core.errors import InvalidArgument, NotPermitted, spelled
from trtforge.core.routes import AUTO_DEFAULT_CPU, AUTO_DEFAULT_GPU, AUTO_ROUTE, ROUTE_CHOICES, TORCH_ROUTES
from trtforge.core.sidecar import Sidecar, read_sidecar
from trtforge.runtime.protocol import Engine

log = logging.getLogger(__name__)

#: Factories named in sidecars are imported only from these packages unless trust_factory=True.
TRUSTED_FACTORY_PREFIXES: tuple[str, ...] = ("trtforge.",)


def aot_package_path(sidecar: Sidecar, device_type: str) -> Path:
    """Where the compiled route keeps its AOTInductor package: beside the engine."""
    base = sidecar.path.parent if sidecar.path is not None else Path(".")
    return base / f"{sidecar.name}_aot_{device_type}.pt2"


def model_from_factory(factory: str, trust_factory: bool = False) -> Any:
    """``"package.module:function"`` → ``function()`` (an eval-mode nn.Module)."""
    module_name, sep, function = factory.partition(":")
    if not sep or not function:
        raise InvalidArgument(f"factory {factory!r} is not 'module:function'; name it as 'package.module:function'")
    if not trust_factory and not module_name.startswith(TRUSTED_FACTORY_PREFIXES):
        raise NotPermitted(
            f"the sidecar names factory {factory!r} outside {TRUSTED_FACTORY_PREFIXES}; importing it "
            "would run its code. Pass model= yourself, or trust_factory=True if you trust the sidecar"
        )
    return getattr(importlib.import_module(module_name), function)().eval()


def untrusted_factory(sidecar: Sidecar, route: str, trust_factory: bool) -> str | None:
    """Why a PyTorch route would refuse the sidecar's factory (a module outside ``TRUSTED_FACTORY_PREFIXES``,
    not trusted): one line for ``serve`` to say before Triton starts; None when it would import it."""
    factory = sidecar.source.factory
    if route not in TORCH_ROUTES or not factory or trust_factory or factory.startswith(TRUSTED_FACTORY_PREFIXES):
        return None
    return (f"route {route!r} imports {sidecar.path}'s model factory {factory!r}, which is outside "
            f"{TRUSTED_FACTORY_PREFIXES} and would run its code; " + spelled(
                cli="pass --trust-factory if you trust the sidecar (its module is imported from the current folder "
                    "or PYTHONPATH)", python="set trust_factory=True (ServeConfig, trtforge.load) if you trust the sidecar"))


def _onnx_file(sidecar: Sidecar, which: str) -> Path:
    """The sidecar's ONNX file for the onnxruntime route, its sha256 checked before anything loads it."""
    if which not in ("reference", "processed"):
        raise InvalidArgument(f"onnx={which!r}: choose 'reference' (the FP32 graph) or 'processed'")
    if sidecar.source.path == "direct":
        raise InvalidArgument(
            f"{sidecar.path} was built on the direct path (PyTorch → TensorRT without ONNX), so there is no "
            "ONNX graph for route 'onnxruntime'; " + spelled(
                cli="choose --route eager (check: with --model package.module:function) or tensorrt, or build "
                    "without --path direct", python="use route='eager' with model=, or build with path='onnx'"))
    if which == "reference" and not sidecar.source.reference_onnx_file:
        which = "processed"
    return sidecar.verify_source_file(which)


def resolve_route(sidecar: Sidecar, route: str) -> str:
    """``route``, or for ``"auto"`` the route of the sidecar's ``tuned`` record when ``trtforge tune`` measured it on
    this device model (GPU model; CPU model without a GPU); otherwise the stated default (``tensorrt`` on a GPU,
    ``onnxruntime`` on the CPU) with one warning line saying why. A measurement from another device is never used.

    Example:
        >>> resolve_route(read_sidecar("tuned/tiny_fp16.json"), "auto")
        'onnxruntime'
    """
    if route != AUTO_ROUTE:
        return route
    from trtforge.core.device_identity import this_device

    device, tuned = this_device(), sidecar.tuned
    if tuned is not None and device.same_model(tuned.device_kind, tuned.device):
        log.info("route='auto': %s was tuned on this %s: route %s", sidecar.path, device.describe(), tuned.route)
        return tuned.route
    default = AUTO_DEFAULT_GPU if device.kind == "gpu" else AUTO_DEFAULT_CPU
    why = ("has no tuned record" if tuned is None else
           f"was tuned on {tuned.device_kind.upper()} {tuned.device}, not on this {device.describe()}")
    log.warning("route='auto': %s %s; using the default route %s (run trtforge tune on this device to choose one)",
                sidecar.path, why, default)
    return default


def route_options(route: str) -> dict[str, Any]:
    """The ``load`` options that make ``route`` run an artifact at its own precision: on ``onnxruntime`` the
    processed graph (``<name>_fp16.onnx``, the one the engine is built from; a BF16 one runs as its emulation),
    not the FP32 reference ``load`` opens by default. ``check`` and ``serve`` load through this: one graph.

    Example:
        >>> route_options("onnxruntime")
        {'onnx': 'processed'}
    """
    return {"onnx": "processed"} if route == "onnxruntime" else {}


def route_graph(sidecar: Sidecar, route: str) -> str | None:
    """The name of the ONNX file ``route`` runs for this artifact (``route_options``), None for a route that runs
    no ONNX graph.

    Example:
        >>> route_graph(read_sidecar("out/tiny_fp16.json"), "onnxruntime")
        'tiny_fp16.onnx'
    """
    route = resolve_route(sidecar, route)
    if route != "onnxruntime" or sidecar.source.path == "direct":
        return None
    return sidecar.source.onnx_file or sidecar.source.reference_onnx_file


def route_refusal(sidecar: Sidecar, route: str, *, here: bool = True) -> str | None:
    """Why ``route`` cannot run this artifact (one line naming the fix), or None when it can.

    Cheap checks only (files, records, this machine's GPUs and bindings; nothing is loaded), for
    callers that must refuse before expensive work: ``serve`` before Triton starts (``here=True``:
    this machine too), ``export triton`` (``here=False``: the artifact alone; the repository runs
    elsewhere).

    Example:
        >>> route_refusal(read_sidecar("out/direct.json"), "onnxruntime", here=False)
        "route 'onnxruntime' runs the ONNX graph beside the engine, and out/direct.json was built on ..."
    """
    if route not in ROUTE_CHOICES:
        return f"unknown route {route!r}; choose one of {ROUTE_CHOICES}"
    route = resolve_route(sidecar, route)
    return LOADERS[route].refusal(sidecar, route, here)


def _onnxruntime_refusal(sidecar: Sidecar, route: str, here: bool) -> str | None:
    """The onnxruntime route needs the ONNX graph beside the engine."""
    if sidecar.source.path == "direct" or not (sidecar.source.reference_onnx_file or sidecar.source.onnx_file):
        return (f"route 'onnxruntime' runs the ONNX graph beside the engine, and {sidecar.path} has none (built on "
                "the direct path or without ONNX); choose --route eager (the PyTorch model) or tensorrt")
    return None


def _torch_refusal(sidecar: Sidecar, route: str, here: bool) -> str | None:
    """A PyTorch route needs the model: a factory in the sidecar, or (``compiled``) an AOTInductor package beside it."""
    base = sidecar.path.parent if sidecar.path is not None else Path(".")
    aot = route == "compiled" and any(base.glob(f"{sidecar.name}_aot_*.pt2"))
    if not sidecar.source.factory and not aot:
        return (f"route {route!r} runs the PyTorch model, and {sidecar.path} names no model factory (only zoo models "
                "do); choose --route onnxruntime or tensorrt")
    return None


def _tensorrt_refusal(sidecar: Sidecar, route: str, here: bool) -> str | None:
    """Whether this machine has what the tensorrt route needs: a CUDA GPU and the engine's bindings (``here=False``:
    the artifact alone, which the engine file holds)."""
    if not here:
        return None
    import importlib.util

    from trtforge.core.machine import cuda_device_count

    if cuda_device_count() == 0:
        return ("route 'tensorrt' needs a CUDA GPU and this machine has none; serve --route onnxruntime or eager here, "
                "or run on a GPU machine")
    flavour = sidecar.builder.flavour or "tensorrt"
    if importlib.util.find_spec(flavour) is None:
        return (f"route 'tensorrt' runs {sidecar.path.name if sidecar.path else 'this engine'} with {flavour}, which is "
                f"not installed here; pip install {flavour.replace('_', '-')} or choose another --route")
    return None


def load(
    path: str | Path,
    route: str = "tensorrt",
    device: Any = None,
    *,
    model: Any = None,
    trust_factory: bool = False,
    move_inputs: bool = False,
    **options: Any,
) -> Engine:
    """Load the engine at ``path`` (the ``.engine``, its ``.json`` sidecar, or an ``.onnx``).

    Options per route: ``tensorrt``: ``cuda_graph``, ``allow_host_code``, ``runtime_cache`` (a
    ``trtforge.cache.runtime_cache.RuntimeCacheStore``: TensorRT-RTX JIT kernels kept across processes); ``compiled``:
    ``compile_mode``, ``aot_package`` (default: ``<name>_aot_<device>.pt2`` beside the engine, used
    when it exists; ``False``: compile the model instead), ``aot_probe`` (default True: load the
    package in a child process first, see ``aot_probe``); ``onnxruntime``: ``onnx`` ("reference" FP32 graph, default, or "processed").

    ``device`` (``"cuda:1"``, ``1``, ``"cpu"``; default the current GPU, else the CPU) holds every
    allocation, stream and graph of the engine. An input on another GPU is refused with the fix,
    unless ``move_inputs=True``, which copies it to ``device`` on each call (``runtime.placement``).

    ``route="auto"``: the route ``trtforge tune`` chose when it measured on this device model (the sidecar's ``tuned``
    record), else a stated default with a warning line (``resolve_route``); on onnxruntime it runs the artifact's own
    graph (``route_options``).

    Example:
        >>> engine = trtforge.load("out/efficientnet_lite0_fp16.engine", route="cuda_graph")
        >>> engine.route, engine.device
        ('cuda_graph', device(type='cuda', index=0))
    """
    if route not in ROUTE_CHOICES:
        raise InvalidArgument(f"unknown route {route!r}; choose one of {ROUTE_CHOICES}")
    path = Path(path)
    if path.suffix == ".onnx" and route == AUTO_ROUTE:
        route = AUTO_DEFAULT_CPU  # a bare graph has no record: the route that runs graphs
    if path.suffix == ".onnx":
        if route != "onnxruntime":
            raise InvalidArgument(f"{path} is an ONNX file: load it with route='onnxruntime', or load its engine")
        from trtforge.runtime.onnxruntime_route import OnnxRuntimeEngine

        return OnnxRuntimeEngine(path, device, move_inputs=move_inputs, **options)
    sidecar = read_sidecar(path)
    if route == AUTO_ROUTE:
        route = resolve_route(sidecar, route)
        options = {**route_options(route), **options}
    request = LoadRequest(device, model, trust_factory, move_inputs, options)
    return LOADERS[route].load(sidecar, route, request)


@dataclass(frozen=True)
class LoadRequest:
    """What ``load`` was asked besides the artifact and the route: the device, ``model=``, ``trust_factory``,
    ``move_inputs`` and the route's own options."""

    device: Any
    model: Any
    trust_factory: bool
    move_inputs: bool
    options: dict[str, Any]


def _tensorrt_engine(sidecar: Sidecar, route: str, request: LoadRequest) -> Engine:
    from trtforge.runtime.tensorrt_route import TensorRTEngine

    return TensorRTEngine(sidecar.engine_path, request.device, sidecar=sidecar, move_inputs=request.move_inputs,
                          **request.options)


def _onnxruntime_engine(sidecar: Sidecar, route: str, request: LoadRequest) -> Engine:
    from trtforge.runtime.onnxruntime_route import OnnxRuntimeEngine

    options = dict(request.options)
    onnx = _onnx_file(sidecar, options.pop("onnx", "reference"))
    return OnnxRuntimeEngine(onnx, request.device, profiles=sidecar.profiles, sidecar=sidecar,
                             move_inputs=request.move_inputs, **options)


def _torch_engine(sidecar: Sidecar, route: str, request: LoadRequest) -> Engine:
    """A PyTorch route over the sidecar's model: the AOTInductor package, ``model=``, or its factory."""
    from trtforge.runtime.placement import default_device
    from trtforge.runtime.torch_routes import TorchEngine

    target, model, options = default_device(request.device), request.model, dict(request.options)
    common = {"route": route, "device": target, "profiles": sidecar.profiles, "sidecar": sidecar,
              "move_inputs": request.move_inputs, "postprocess": _postprocess(sidecar)}
    if route == "compiled":
        package = options.pop("aot_package", None)  # False: ignore any package, compile the model
        probe = options.pop("aot_probe", True)
        package = None if package is False else Path(package) if package is not None else aot_package_path(
            sidecar, target.type)
        if package is not None and package.is_file():
            return TorchEngine(None, sidecar.inputs, sidecar.outputs, aot_package=package, aot_probe=probe, **common)
    if model is None:
        factory = sidecar.source.factory
        if not factory:
            raise InvalidArgument(
                f"route {route!r} runs the PyTorch model, and sidecar {sidecar.path} names no factory "
                "(only zoo models do). Pass the model: trtforge.load(path, route=..., model=my_module)"
            )
        model = model_from_factory(factory, request.trust_factory)
    return TorchEngine(model, sidecar.inputs, sidecar.outputs, **common, **options)


@dataclass(frozen=True)
class RouteLoader:
    """One route's entry in the registry: how ``load`` opens an artifact on it, and why it cannot (cheap checks,
    ``route_refusal``; ``here=False``: the artifact alone, not this machine)."""

    load: Callable[[Sidecar, str, LoadRequest], Engine]
    refusal: Callable[[Sidecar, str, bool], str | None]


#: Every route (``core.routes.ROUTES``) → its loader and refusal; the PyTorch routes share theirs.
LOADERS: dict[str, RouteLoader] = {
    "tensorrt": RouteLoader(_tensorrt_engine, _tensorrt_refusal),
    "onnxruntime": RouteLoader(_onnxruntime_engine, _onnxruntime_refusal),
    **dict.fromkeys(TORCH_ROUTES, RouteLoader(_torch_engine, _torch_refusal)),
}


def _postprocess(sidecar: Sidecar) -> Any:
    """The NMS the build appended to the graph (``graph_edits.nms``), for the PyTorch routes to append after the
    module, whose outputs end at the raw head (a cut artifact's ``model=`` returns the tensors it was cut at);
    None when there is none."""
    edits = sidecar.graph_edits
    if edits is None or edits.nms is None:
        return None
    from trtforge.core.postprocess import NMS

    record = edits.nms
    return NMS(record.head, score_threshold=record.score_threshold, iou_threshold=record.iou_threshold,
               max_detections=record.max_detections, candidates=record.candidates,
               class_agnostic=record.class_agnostic)


def export_aot_beside(
    path: str | Path, device: Any = None, *, model: Any = None, trust_factory: bool = False,
    batch: tuple[int, int] | None = None,
) -> Path:
    """Compile the artifact's model with AOTInductor into ``<name>_aot_<device>.pt2`` beside the engine.

    ``trtforge.load(path, route="compiled")`` then runs that package without the model's Python
    code. The batch range defaults to the sidecar's profiles (smallest min to largest max).

    Example:
        >>> export_aot_beside("out/efficientnet_lite0_fp16.json", "cuda")
        PosixPath('out/efficientnet_lite0_fp16_aot_cuda.pt2')
    """
    from trtforge.runtime.placement import default_device
    from trtforge.runtime.torch_routes import export_aot_package

    sidecar = read_sidecar(Path(path))
    target = default_device(device)
    if model is None:
        factory = sidecar.source.factory
        if not factory:
            raise InvalidArgument(f"sidecar {sidecar.path} names no factory; pass model=")
        model = model_from_factory(factory, trust_factory)
    if batch is None:
        first = sidecar.inputs[0].name
        ranges = [p[first] for p in sidecar.profiles if first in p]
        batch = (min(r["min"][0] for r in ranges), max(r["max"][0] for r in ranges)) if ranges else (1, 8)
    return export_aot_package(model, sidecar.inputs, aot_package_path(sidecar, target.type), device=target, batch=batch)
