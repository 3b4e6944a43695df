"""Layer-wise divergence: where along the graph does a candidate (FP16, INT8, a broken export) leave its reference?

Every intermediate tensor that both graphs produce under the same name becomes an extra output
of each (``passes.graph.ort_session``), a chunk of them at a time so that the tensors held at once
stay within ``max_memory``; both run the same inputs in ONNX Runtime and each shared tensor gets its
error (per-sample metrics summed batch by batch), in the reference's graph order. The first tensor past the threshold names
the layer where the candidate diverges. The precision passes keep the names of the layers they
touch, so a processed graph lines up with its FP32 reference.

A candidate with Q/DQ nodes runs with FP32 scales (``passes.float16.upcast_float16``): ONNX
Runtime's CPU provider mis-evaluates FP16 scales, and the INT8 grid is the same. A BF16 graph runs as its
emulation graph (``core.bf16_emulation``: FP32 compute, each value stored in BF16 rounded to BF16, names kept):
the CPU provider has no BF16 Conv or MatMul.

Example:
    >>> report = layerwise(Path("m_reference_fp32.onnx"), Path("m_int8.onnx"), samples=8)
    >>> report.first.label, report.first.rel_l2
    ('_blocks.1._depthwise_conv', 0.31)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx_ir as ir

from trtforge.core.memory import trim_heap
from trtforge.core.precisions import RECORDS
from trtforge.core.specs import TensorSpec
from trtforge.measure.inputs import make_inputs, split_batches
from trtforge.passes.float16 import upcast_float16
from trtforge.passes.graph import has_qdq, input_specs, layer_label, load_ir, ort_session, to_proto

#: Per-tensor relative L2 that counts as diverged, by the candidate's precision: each precision record's
#: ``layer_threshold`` (``core.precisions``, where the reasons are).
LAYER_THRESHOLDS: dict[str, float] = {p.name: p.layer_threshold for p in RECORDS}


@dataclass(frozen=True)
class LayerError:
    """The error of one shared tensor: its place in graph order, producer and metrics.

    ``added``: its relative L2 less the largest of its inputs' (what this layer itself adds).
    """

    index: int
    tensor: str
    op_type: str
    label: str
    rel_l2: float
    cosine: float
    max_abs: float
    added: float = 0.0


@dataclass(frozen=True)
class LayerwiseReport:
    """Every shared tensor's error in graph order, the threshold, and the first layer past it."""

    layers: tuple[LayerError, ...]
    threshold: float
    precision: str
    notes: tuple[str, ...] = ()

    @property
    def first(self) -> LayerError | None:
        return next((layer for layer in self.layers if not layer.rel_l2 <= self.threshold), None)

    def most_added(self, count: int = 5) -> list[LayerError]:
        """The layers that add the most error themselves (compare with INT8 sensitivity ranking)."""
        return sorted(self.layers, key=lambda layer: -layer.added)[:count]


def graph_precision(model: ir.Model) -> str:
    """The graph's precision: from its Q/DQ nodes when it has them (E4M3 values, weight-only DequantizeLinear,
    else W8A8), else from its reduced-precision value types, else FP32."""
    if has_qdq(model):
        dequantized = {node.inputs[0].dtype for node in model.graph if node.op_type == "DequantizeLinear"}
        if ir.DataType.FLOAT8E4M3FN in dequantized:
            return "fp8"
        if not any(node.op_type == "QuantizeLinear" for node in model.graph):
            return "int4-wo" if ir.DataType.INT4 in dequantized else "int8-wo"
        return "int8"
    dtypes = {out.dtype for node in model.graph for out in node.outputs if out.dtype is not None}
    if ir.DataType.FLOAT16 in dtypes:
        return "fp16"
    return "bf16" if ir.DataType.BFLOAT16 in dtypes else "fp32"


def shared_tensors(reference: ir.Model, candidate: ir.Model) -> list[tuple[str, ir.Node]]:
    """(name, reference producer) of each tensor both graphs compute, in the reference's graph order."""
    produced = {out.name for node in candidate.graph for out in node.outputs if out.name}
    inputs = {v.name for v in reference.graph.inputs}
    return [(out.name, node) for node in reference.graph for out in node.outputs
            if out.name and out.name in produced and out.name not in inputs]


def emulated(model: ir.Model, role: str) -> tuple[ir.Model, tuple[str, ...]]:
    """``model``, or its BF16 emulation graph (``core.bf16_emulation``: ONNX Runtime's CPU provider has no BF16
    Conv or MatMul) with a note; the emulation keeps every tensor's name, so the layers still line up."""
    from trtforge.core.bf16_emulation import EMULATED, emulate_bf16

    values = (*model.graph.inputs, *model.graph.initializers.values(),
              *(out for node in model.graph.all_nodes() for out in node.outputs))
    if not any(value.dtype == ir.DataType.BFLOAT16 for value in values):
        return model, ()
    return load_ir(emulate_bf16(to_proto(model))), (f"the {role} runs {EMULATED} (each value the graph stores in "
                                                     "BF16 rounded to BF16)",)


def runnable(model: ir.Model) -> tuple[ir.Model, tuple[str, ...]]:
    """The graph ONNX Runtime runs for ``model``, and a note when it had to change it."""
    model, notes = emulated(model, "candidate")
    if notes:
        return model, notes
    if has_qdq(model) and any(v.dtype == ir.DataType.FLOAT16 for v in model.graph.initializers.values()):
        return upcast_float16(model), ("the candidate's Q/DQ graph runs with FP32 scales and FP32 arithmetic "
                                       "(ONNX Runtime's CPU provider mis-evaluates FP16 scales); INT8 grid unchanged",)
    return model, ()


def default_max_memory() -> int:
    """Bytes the layer-wise outputs may hold at once: a quarter of the memory available now, at most 4 GiB."""
    import os

    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            available = next(int(line.split()[1]) * 1024 for line in meminfo if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError):
        available = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return max(64 << 20, min(available // 4, 4 << 30))


def tensor_bytes(model: ir.Model, feeds: Mapping[str, np.ndarray]) -> dict[str, int]:
    """Bytes of each tensor of ``model`` for one run on ``feeds`` (ONNX shape inference on the feeds' shapes);
    a tensor whose shape stays unknown gets the largest known size."""
    import onnx

    from trtforge.passes.graph import to_proto

    proto = onnx.ModelProto.FromString(to_proto(model).SerializeToString())
    for value in proto.graph.input:
        if value.name in feeds and value.type.HasField("tensor_type"):
            dims = value.type.tensor_type.shape.dim
            del dims[:]
            for size in np.shape(feeds[value.name]):
                dims.add().dim_value = int(size)
    try:
        inferred = onnx.shape_inference.infer_shapes(proto, data_prop=True)
    except Exception:  # noqa: BLE001 - a graph shape inference cannot read: every size unknown, see below
        inferred = proto
    sizes: dict[str, int] = {}
    for info in inferred.graph.value_info:
        kind = info.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else -1 for d in kind.shape.dim]
        if kind.elem_type and -1 not in dims:
            itemsize = onnx.helper.tensor_dtype_to_np_dtype(kind.elem_type).itemsize
            sizes[info.name] = int(np.prod(dims, dtype=np.int64)) * itemsize
    largest = max(sizes.values(), default=sum(np.asarray(v).nbytes for v in feeds.values()))
    return {name: sizes.get(name, largest) for node in model.graph for name in (o.name for o in node.outputs) if name}


def chunks(names: list[str], sizes: Mapping[str, int], budget: int) -> list[list[str]]:
    """``names`` in order, in runs whose summed ``sizes`` stay within ``budget`` (at least one name each).

    Example:
        >>> chunks(["a", "b", "c"], {"a": 4, "b": 4, "c": 4}, 8)
        [['a', 'b'], ['c']]
    """
    out: list[list[str]] = []
    held = 0
    for name in names:
        if out and held + sizes.get(name, 0) <= budget:
            out[-1].append(name)
            held += sizes.get(name, 0)
        else:
            out.append([name])
            held = sizes.get(name, 0)
    return out


@dataclass
class _Sums:
    """Per-sample metrics of one tensor summed over the batches (memory: a few floats per tensor)."""

    rel_l2: float = 0.0
    cosine: float = 0.0
    max_abs: float = 0.0
    count: int = 0
    comparable: bool = True


def _accumulate(sums: _Sums, ref: np.ndarray, test: np.ndarray) -> None:
    from trtforge.core.metrics import per_sample_stats

    if ref.dtype.kind != "f" or ref.shape != test.shape or ref.ndim == 0:
        sums.comparable = False  # shape arithmetic, or a tensor the candidate computes another way
        return
    rel_l2, cosine, worst = per_sample_stats([ref], [test])
    sums.rel_l2 += float(rel_l2.sum())
    sums.cosine += float(cosine.sum())
    sums.max_abs = max(sums.max_abs, float(worst.max()) if worst.size else 0.0)
    sums.count += ref.shape[0]


def _stream(ref_model: ir.Model, cand_model: ir.Model, names: list[str], batches: list[dict[str, np.ndarray]],
            budget: int, progress: Callable[[int, int], None] | None) -> dict[str, _Sums]:
    """Both graphs on every batch, ``names`` as extra outputs a chunk at a time (``chunks``), so that the
    tensors held at once stay within ``budget``; each tensor's metrics are summed batch by batch."""
    sizes = tensor_bytes(ref_model, batches[0])
    runs = chunks(names, sizes, max(1, budget // 2))  # both graphs' outputs of one batch held at once
    sums = {name: _Sums() for name in names}
    for index, run in enumerate(runs):
        ref_session = ort_session(ref_model, extra_outputs=run)
        cand_session = ort_session(cand_model, extra_outputs=run)
        for batch in batches:
            ref_values = ref_session.run(run, batch)
            cand_values = cand_session.run(run, batch)
            for name, ref, test in zip(run, ref_values, cand_values, strict=True):
                _accumulate(sums[name], np.asarray(ref), np.asarray(test))
            del ref_values, cand_values
            trim_heap()
        del ref_session, cand_session
        trim_heap()
        if progress is not None:
            progress(index + 1, len(runs))
    return sums


def layerwise(
    reference: Path | ir.Model, candidate: Path | ir.Model, inputs: Mapping[str, np.ndarray] | None = None,
    samples: int = 8, threshold: float | None = None, batch: int = 4, max_memory: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> LayerwiseReport:
    """Per-layer error of ``candidate`` against ``reference`` on the same inputs (see the module docstring).

    ``threshold`` (relative L2) defaults to the candidate precision's ``LAYER_THRESHOLDS``. The shared
    tensors are read a chunk at a time, so the intermediate tensors held at once stay within
    ``max_memory`` bytes (default ``default_max_memory()``); ``progress(done, total)`` is called per chunk.
    """
    from trtforge.measure.inputs import batch_size, static_rows

    ref_model, cand_model = load_ir(reference), load_ir(candidate)
    precision = graph_precision(cand_model)
    ref_model, ref_notes = emulated(ref_model, "reference")
    cand_model, notes = runnable(cand_model)
    notes = ref_notes + notes
    specs = [TensorSpec(n, dtype.name, tuple(-1 if d is None else d for d in shape))
             for n, dtype, shape in input_specs(ref_model)]
    if inputs is None:
        inputs = make_inputs(specs, (), samples)
    count = next(iter(inputs.values())).shape[0] if inputs else 1
    if specs and static_rows(specs, count) is not None:
        batch = batch_size(specs, (), count)  # a static batch runs as it is
    shared = shared_tensors(ref_model, cand_model)
    names = [name for name, _ in shared]
    batches = split_batches(inputs, batch) if inputs else [{}]
    sums = _stream(ref_model, cand_model, names, batches, max_memory or default_max_memory(), progress)
    rows, errors = [], {}
    for index, (name, node) in enumerate(shared):
        got = sums[name]
        if not got.comparable or not got.count:
            continue
        rel_l2, cosine = got.rel_l2 / got.count, got.cosine / got.count
        errors[name] = rel_l2
        upstream = max((errors.get(v.name, 0.0) for v in node.inputs if v is not None), default=0.0)
        rows.append(LayerError(index, name, node.op_type, layer_label(node), rel_l2, cosine, got.max_abs,
                               rel_l2 - upstream))
    limit = threshold if threshold is not None else LAYER_THRESHOLDS[precision]
    skipped = len(shared) - len(rows)
    if skipped:
        notes += (f"{skipped} shared tensors are not float or differ in shape (shape arithmetic); not compared",)
    return LayerwiseReport(tuple(rows), limit, precision, notes)


def plot(report: LayerwiseReport, path: Path, title: str = "") -> Path | None:
    """Relative L2 along the depth as a PNG (log scale), the threshold and the first layer marked.

    Returns None when matplotlib is missing (``pip install matplotlib``; ``make setup`` installs it).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    from trtforge.core.atomic import atomic_writer

    fig, ax = plt.subplots(figsize=(10, 4))
    depth = [layer.index for layer in report.layers]
    ax.semilogy(depth, [max(layer.rel_l2, 1e-12) for layer in report.layers], ".-", lw=1, label="relative L2")
    ax.axhline(report.threshold, color="tab:red", ls="--", lw=1, label=f"threshold {report.threshold:g}")
    if report.first is not None:
        ax.axvline(report.first.index, color="tab:orange", lw=1, label=f"first past: {report.first.label}")
    ax.set_xlabel("tensor index in the reference's graph order")
    ax.set_ylabel("relative L2 vs reference")
    ax.set_title(title or f"layer-wise divergence ({report.precision} candidate)")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    with atomic_writer(Path(path)) as handle:
        fig.savefig(handle, format="png", dpi=110)
    plt.close(fig)
    return Path(path)

