"""``trtforge compare A B``: the same inputs through two models, output by output.

A side is one of (``open_side``):

- a torch module factory ``package.module:function`` (run in FP32 on the CPU, or ``device``);
- an ``.onnx`` file (ONNX Runtime);
- an artifact (``.json``/``.engine``) through a route: ``PATH`` uses ``route``, ``PATH@fp16`` names one;
  ``PATH@onnxruntime`` runs the artifact's processed graph (what its engine was built from; BF16 as its
  emulation graph, ``core.bf16_emulation``), ``PATH@onnxruntime:reference`` its FP32 reference graph;
- saved outputs (``.npz``, e.g. from ``--save-outputs`` on another machine).

Inputs come from ``inputs`` (an ``.npz``), else from the first side that knows its input specs
(photo crops when it is an artifact with a recorded preprocessing).

Example:
    >>> result = compare_sides("trtforge.zoo:efficientnet_lite0", "out/efficientnet_lite0_fp16.json@fp16")
    >>> result.judgement.passed, result.judgement.outputs[0].top1
    (True, 1.0)
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from trtforge.builder.progress import StepProgress
from trtforge.core.errors import InvalidArgument, MissingFile
from trtforge.core.metrics import batch_rows, join_runs
from trtforge.core.specs import TensorSpec
from trtforge.debug.check import ROUTE_PRECISION, run_batches
from trtforge.debug.tolerances import Judgement, judge
from trtforge.measure.inputs import (
    batch_size,
    load_npz,
    make_inputs,
    refuse_bad_indices,
    save_npz,
    split_batches,
    unbatched,
)

if TYPE_CHECKING:
    from trtforge.runtime.onnxruntime_route import OnnxRuntimeEngine

Batches = list[dict[str, np.ndarray]]


@dataclass
class Side:
    """One side of a comparison: what it takes (when known) and how it runs a list of batches."""

    label: str
    run: Callable[[Batches, tuple[str, ...]], dict[str, np.ndarray]]
    inputs: tuple[TensorSpec, ...] | None = None
    outputs: tuple[str, ...] = ()
    output_specs: tuple[TensorSpec, ...] = ()
    profiles: tuple = ()
    preprocessing: dict | None = None
    precision: str = "fp32"
    graph: Path | None = None  # an ONNX graph the task can be read from
    runs: Path | None = None  # the ONNX graph this side runs (an .onnx file, or an artifact@onnxruntime)
    evaluator: str = ""  # how ONNX Runtime runs ``runs`` when not as it is (BF16: its emulation graph)


@dataclass(frozen=True)
class Comparison:
    """Both sides' labels, the inputs used, both outputs and the judgement."""

    a: str
    b: str
    inputs: dict[str, np.ndarray]
    outputs_a: dict[str, np.ndarray]
    outputs_b: dict[str, np.ndarray]
    judgement: Judgement
    runs: tuple[str, str] = ("", "")  # what each side ran: "GRAPH.onnx" (and its evaluator), or "" for an engine
    samples: int = 1  # how many samples ran (1 for a model without a sample axis)


def _module_side(factory: str, device: Any) -> Side:
    import torch

    from trtforge.runtime.load import model_from_factory

    # The user named this factory on the command line: importing it is what they asked for.
    model = model_from_factory(factory, trust_factory=True).to(device or "cpu")

    def run(batches: Batches, names: tuple[str, ...]) -> dict[str, np.ndarray]:
        parts: dict[str, list[np.ndarray]] = {}
        with torch.no_grad():
            for batch in batches:
                result = model(*[torch.from_numpy(v).to(device or "cpu") for v in batch.values()])
                values = (list(result.values()) if isinstance(result, dict)
                          else list(result) if isinstance(result, (tuple, list)) else [result])
                keys = names if len(names) == len(values) else tuple(f"output_{i}" for i in range(len(values)))
                for key, value in zip(keys, values, strict=True):
                    parts.setdefault(key, []).append(value.detach().float().cpu().numpy())
        rows = [batch_rows(batch) for batch in batches]
        return {k: join_runs(v, rows) for k, v in parts.items()}

    return Side(factory, run)


def _engine_side(label: str, engine: Any, stack: contextlib.ExitStack, **fields: Any) -> Side:
    stack.enter_context(engine)
    names = tuple(s.name for s in engine.outputs)
    return Side(label, lambda batches, _names: run_batches(engine, batches), inputs=engine.inputs, outputs=names,
                output_specs=tuple(engine.outputs), profiles=engine.profiles, **fields)


def open_side(text: str, stack: contextlib.ExitStack, route: str = "tensorrt", device: Any = None,
              **options: Any) -> Side:
    """A ``Side`` for ``text`` (see the module docstring); engines close with ``stack``; ``options`` go to
    ``trtforge.load`` for an artifact (e.g. ``bindings=`` for the TensorRT double)."""
    path_text, _, named_route = text.partition("@") if text.rsplit("@", 1)[0].endswith((".json", ".engine")) \
        else (text, "", "")
    path = Path(path_text)
    if path.suffix == ".npz":
        if not path.is_file():
            raise MissingFile(f"no saved outputs at {path}")
        with np.load(path) as data:
            saved = {k: data[k] for k in data.files}
        return Side(text, lambda batches, names: saved, outputs=tuple(saved))
    if path.suffix == ".onnx":
        from trtforge.debug.layerwise import graph_precision
        from trtforge.passes.graph import load_ir

        precision = graph_precision(load_ir(path))
        engine = _graph_engine(path, device)
        return _engine_side(text, engine, stack, graph=path, precision=precision, runs=path,
                            evaluator=engine.evaluator or "")
    if path.suffix in (".json", ".engine"):
        return _artifact_side(text, path, named_route or route, device, stack, **options)
    if ":" in text and not path.exists():
        return _module_side(text, device)
    raise InvalidArgument(f"{text!r}: give a module factory 'package.module:function', an .onnx file, an artifact "
                          "(.json/.engine, optionally @route) or saved outputs (.npz)")


def _graph_engine(path: Path, device: Any, profiles: tuple = (), sidecar: Any = None) -> OnnxRuntimeEngine:
    """ONNX Runtime for ``path`` (a BF16 graph runs as its emulation graph: ORT has no BF16 Conv or MatMul)."""
    from trtforge.runtime.onnxruntime_route import OnnxRuntimeEngine

    return OnnxRuntimeEngine(path, device, profiles=profiles, sidecar=sidecar)


def _artifact_side(text: str, path: Path, route: str, device: Any, stack: contextlib.ExitStack, **options: Any) -> Side:
    """An artifact through ``route``; ``onnxruntime`` runs its processed graph (what the engine was built from),
    ``onnxruntime:reference`` its FP32 reference graph."""
    from trtforge.core.sidecar import read_sidecar
    from trtforge.runtime.load import load

    sidecar = read_sidecar(path)
    reference = sidecar.path.parent / (sidecar.source.reference_onnx_file or sidecar.source.onnx_file or "")
    fields = {"preprocessing": sidecar.preprocessing, "graph": reference if reference.suffix == ".onnx" else None}
    route, _, which = route.partition(":")
    if which and (route != "onnxruntime" or which not in ("reference", "processed")):
        raise InvalidArgument(f"{text!r}: only @onnxruntime takes a graph, as @onnxruntime:processed (the default) "
                              "or @onnxruntime:reference")
    if route == "onnxruntime":
        if not sidecar.source.onnx_file:
            raise InvalidArgument(f"{text!r}: {sidecar.path} was built on the direct path and has no ONNX graph for "
                                  "@onnxruntime; compare it through an engine route, or against its module factory")
        graph = sidecar.verify_source_file("reference" if which == "reference" and sidecar.source.reference_onnx_file
                                           else "processed")  # sha256 checked
        precision = "fp32" if which == "reference" else (sidecar.precision.built or "fp32")
        engine = _graph_engine(graph, device, tuple(sidecar.profiles), sidecar)
        return _engine_side(text, engine, stack, precision=precision, runs=graph,
                            evaluator=engine.evaluator or "", **fields)
    engine = load(path, route=route, device=device, **options)
    precision = ROUTE_PRECISION.get(route) or sidecar.precision.built  # the route's, else the engine's own
    return _engine_side(text, engine, stack, precision=precision or "fp32", **fields)


def _same_graph(a: Side, b: Side) -> None:
    """Refuse a comparison of one graph with itself: it passes whatever the graph does."""
    from trtforge.core.hashing import sha256_file

    if a.runs is not None and b.runs is not None and sha256_file(a.runs) == sha256_file(b.runs):
        raise InvalidArgument(f"both sides run the same graph ({a.runs}), so the comparison would pass whatever it "
                              "computes; compare the FP32 reference with the processed graph, e.g. "
                              "MODEL_reference_fp32.onnx against MODEL_fp16.json@onnxruntime")


def _task(a: Side, b: Side) -> str:
    graph = a.graph or b.graph
    if graph is None or not graph.is_file():
        return "other"
    from trtforge.passes.graph import load_ir
    from trtforge.quantize.task import detect_task

    return detect_task(load_ir(graph))


def compare_sides(
    a: str, b: str, route: str = "tensorrt", device: Any = None, samples: int = 16, inputs: Path | None = None,
    limit: float | None = None, progress: StepProgress | None = None, **options: Any,
) -> Comparison:
    """Run ``a`` and ``b`` on the same inputs and judge ``b`` against ``a`` (see the module docstring).

    ``progress`` shows a bar per side while it runs.
    """
    with contextlib.ExitStack() as stack:
        side_a, side_b = open_side(a, stack, route, device, **options), open_side(b, stack, route, device, **options)
        _same_graph(side_a, side_b)
        # the side whose profiles bound the shapes (an artifact), else the one that knows its inputs
        known = next((s for s in (side_a, side_b) if s.inputs is not None and s.profiles), None) or (
            side_a if side_a.inputs is not None else side_b)
        if known.inputs is None and inputs is None:
            raise InvalidArgument("neither side says what inputs it takes (a module or saved outputs); "
                                  "pass --inputs INPUTS.npz")
        specs = known.inputs or ()
        # no sample axis to split along (no inputs, or a rank-0 input or output): one call on one input set
        whole = known.inputs is not None and unbatched(specs, side_a.output_specs + side_b.output_specs)
        if inputs is not None:
            arrays = load_npz(inputs, specs, batched=not whole) if specs else dict(np.load(inputs))
            refuse_bad_indices(arrays, [side_a.graph, side_b.graph])
        else:
            arrays = make_inputs(specs, known.profiles, 1 if whole else samples,
                                 known.preprocessing or side_b.preprocessing)
        count = 1 if whole else next(iter(arrays.values())).shape[0]
        batches = [arrays] if whole else split_batches(
            arrays, batch_size(specs, known.profiles, count) if specs else count)
        names = side_a.outputs or side_b.outputs
        done = progress.stage(f"A runs {side_a.label}", 1) if progress is not None else None
        out_a = side_a.run(batches, names)
        if done is not None:
            done()
            done = progress.stage(f"B runs {side_b.label}", 1)
        out_b = side_b.run(batches, side_b.outputs or tuple(out_a))
        if done is not None:
            done()
        if set(out_a) != set(out_b) and len(out_a) == len(out_b):  # a module's outputs have no names
            out_b = dict(zip(out_a, out_b.values(), strict=True))
        judgement = judge(out_a, out_b, task=_task(side_a, side_b), precision=side_b.precision, limit=limit)
    runs = tuple("" if side.runs is None else f"{side.runs}" + (f" ({side.evaluator})" if side.evaluator else "")
                 for side in (side_a, side_b))
    return Comparison(a, b, arrays, out_a, out_b, judgement, runs, count)


def save_run(result: Comparison, inputs_path: Path | None, outputs_path: Path | None) -> list[Path]:
    """``--save-inputs`` (the inputs) and ``--save-outputs`` (side A's outputs, the reference to compare
    against elsewhere: ``trtforge compare OUTPUTS.npz ARTIFACT --inputs INPUTS.npz``)."""
    written = []
    if inputs_path is not None:
        written.append(save_npz(inputs_path, result.inputs))
    if outputs_path is not None:
        written.append(save_npz(outputs_path, result.outputs_a))
    return written
