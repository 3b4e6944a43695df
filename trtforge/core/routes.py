"""The routes an artifact runs on, named once: what each runs, what it needs, the precision of its numbers.

Plain data (no imports), so the CLI's help strings read it without loading the runtime.

Example:
    >>> ROUTE_NAMES
    ('tensorrt', 'eager', 'fp16', 'cuda_graph', 'compiled', 'onnxruntime')
    >>> TORCH_ROUTES, ENGINE_ROUTES
    (('eager', 'fp16', 'cuda_graph', 'compiled'), ('tensorrt', 'onnxruntime'))
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Route:
    """One route: its name, what runs, what it needs, and what it runs."""

    name: str
    runs: str
    needs: str
    #: "artifact": the built files (the engine, or the reference ONNX beside it); "torch": the PyTorch model.
    family: str
    #: The precision its numbers have; None: the precision the engine was built in.
    precision: str | None


#: The routes table of docs/routes.md is generated from this table (docs/hooks.py).
ROUTES: tuple[Route, ...] = (
    Route("tensorrt", "the TensorRT engine, execute_async_v3 on a stream of its own per context (or stream=), "
          "ordered with the caller's by events; cuda_graph=True to replay",
          "a CUDA GPU, TensorRT 10+ or TensorRT-RTX bindings, the .engine with its sidecar", "artifact", None),
    Route("eager", "the PyTorch model in FP32", "torch; the model (zoo factory in the sidecar, or model=)",
          "torch", "fp32"),
    Route("fp16", "the PyTorch model in FP16, channels-last on the GPU", "torch; the model; a GPU for speed",
          "torch", "fp16"),
    Route("cuda_graph", "the FP16 model captured as one CUDA graph per batch size",
          "torch with CUDA; the model (on CPU: plain FP16)", "torch", "fp16"),
    Route("compiled", "torch.compile(mode='max-autotune') in FP16, or an AOTInductor .pt2 beside the engine",
          "torch, a C++ compiler, Triton on GPU; the model unless the .pt2 exists", "torch", "fp16"),
    Route("onnxruntime", "the FP32 reference ONNX graph in ONNX Runtime (CPU, or the CUDA provider)",
          "onnxruntime; the .onnx beside the engine", "artifact", None),
)
ROUTE_NAMES: tuple[str, ...] = tuple(r.name for r in ROUTES)
#: The routes that run the PyTorch model (``trtforge.runtime.torch_routes``).
TORCH_ROUTES: tuple[str, ...] = tuple(r.name for r in ROUTES if r.family == "torch")
#: The routes that run the built files, so they need an engine path (not a zoo model).
ENGINE_ROUTES: tuple[str, ...] = tuple(r.name for r in ROUTES if r.family == "artifact")
#: Route → the precision its numbers have (None: the engine's own).
ROUTE_PRECISION: dict[str, str | None] = {r.name: r.precision for r in ROUTES}
#: What ``trtforge bench`` times when no ``--route`` is given (``compiled`` compiles for minutes).
DEFAULT_BENCH_ROUTES: tuple[str, ...] = ("eager", "fp16", "cuda_graph")
#: Where the engine parts of a partitioned module (``compile(path="direct", min_block_size=...)``) run: the
#: reference evaluator on the CPU (the recorded network, host hops between parts), for machines without TensorRT.
EVALUATOR_ROUTE = "evaluator"
#: The runners a partitioned module's engine parts may take (``PartitionedArtifact.load(route=...)``): the
#: TensorRT route (``trtforge.runtime.partitioned``) or the evaluator.
PARTITION_ROUTES: tuple[str, ...] = (ROUTES[0].name, EVALUATOR_ROUTE)
#: ``route="auto"`` (``trtforge.load``, the predictor, ``serve``): the route of the artifact's ``tuned`` record when
#: it was measured on this GPU model (CPU name on a machine without one), else the stated default below.
AUTO_ROUTE = "auto"
#: ``route="auto"``'s default without a tuned record for this device: the engine on a GPU, its graph on the CPU.
AUTO_DEFAULT_GPU, AUTO_DEFAULT_CPU = ROUTES[0].name, ROUTES[-1].name
#: Every value a ``route=`` option takes: the routes and ``auto``.
ROUTE_CHOICES: tuple[str, ...] = (*ROUTE_NAMES, AUTO_ROUTE)
