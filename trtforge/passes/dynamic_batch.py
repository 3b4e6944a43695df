"""``dynamic_batch=True`` (``--dynamic-batch``): a static ONNX file, exported at a fixed batch, made batchable.

Many exported models are fixed at batch 1, and a user holding only the ``.onnx`` cannot re-export it.
The pass, in order:

1. dim 0 of the batched inputs (``batched_inputs``, else every input whose dim 0 equals the first
   input's) and of the outputs that carry that batch becomes the symbolic ``batch``;
2. constants that hard-code the batch are rewritten: a ``Reshape`` shape whose dim 0 is the batch
   reads ``-1`` there (``0`` when the shape has a ``-1`` already, with ``allowzero=0``), an ``Expand`` shape reads ``1``
   there (broadcast keeps the input's rows), a constant ``Concat`` operand of one row (a class
   token) is expanded to the rows of the batched operand beside it, and one that numbers the rows
   (``arange(batch)`` as a ``GatherND``'s row index) counts the rows at run time, a ``GatherElements`` table of
   one row read with batched indices (RoBERTa's token types) is expanded to their rows; a ``Reshape`` that
   folds the batch into its rows (``[B, C, H, W] → [B·k, ...]``) or unfolds it, and a ``Resize`` to
   constant sizes, read their dim 0 from the data at run time;
3. ONNX shape inference must agree: every batched output keeps a symbolic dim 0;
4. the proof on the reference: ONNX Runtime at batch 2 equals two batch-1 runs, row by row, on distinct
   rows (random floats; token ids random within the tables their Gathers read, never 0; masks 1).

A graph that fails 3 or 4 is refused in one line naming the node that pins the batch.

Example:
    >>> model = make_batch_dynamic(load_ir(Path("model_static_b1.onnx")))
    >>> [str(d) for d in model.graph.inputs[0].shape][:1]
    ['batch']
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import onnx_ir as ir

from trtforge.core.errors import Unsupported, spelled
from trtforge.passes.graph import constant_value, infer_shapes, ort_session
from trtforge.passes.index_ranges import table_rows

BATCH = "batch"
#: Rows of the proof run; each is compared with its own batch-1 run.
PROOF_ROWS = 2
#: Largest relative difference between a batch-2 row and its batch-1 run (float reassociation only).
PROOF_TOLERANCE = 1e-4


class BatchPinned(Unsupported):
    """The graph pins its batch: a node the pass cannot rewrite fixes the rows it computes."""


def _flag() -> str:
    return spelled(cli="--dynamic-batch", python="dynamic_batch=True")


def _batched_inputs(model: ir.Model, batched: Sequence[str] | None) -> tuple[list[ir.Value], int]:
    """The inputs that carry the batch and their (common) fixed batch."""
    inputs = [v for v in model.graph.inputs if not v.is_initializer()]
    ranked = [v for v in inputs if v.shape is not None and v.shape.rank() > 0]
    if batched is not None:
        chosen = [v for v in ranked if v.name in set(batched)]
    else:
        first = next((v.shape[0] for v in ranked), None)
        chosen = [v for v in ranked if v.shape[0] == first]
    fixed = {v.shape[0] for v in chosen}
    if not chosen or len(fixed) != 1 or not isinstance(next(iter(fixed)), int):
        raise BatchPinned(f"{_flag()}: the graph has no input with a fixed dim 0 to batch (inputs "
                          f"{[(v.name, str(v.shape)) for v in inputs]}); it is dynamic already or takes no batch")
    return chosen, int(next(iter(fixed)))


def _set_dim0(value: ir.Value, dim: object) -> None:
    value.shape = ir.Shape([dim, *list(value.shape)[1:]])


def _const_input(node: ir.Node, index: int) -> np.ndarray | None:
    if len(node.inputs) <= index or node.inputs[index] is None:
        return None
    return constant_value(node.inputs[index])


def _replace_const(node: ir.Node, index: int, array: np.ndarray, name: str) -> None:
    value = ir.Value(name=name, const_value=ir.tensor(array, name=name), type=ir.TensorType(ir.DataType.INT64),
                     shape=ir.Shape(list(array.shape)))
    node.graph.initializers[name] = value
    node.replace_input_with(index, value)


def _rewrite_shapes(model: ir.Model, batch: int) -> list[str]:
    """Reshape/Expand shape constants that hard-code the batch: rewritten; the names of the nodes changed."""
    changed = []
    live = _input_dependent(model)
    for node in list(model.graph):
        if node.op_type == "Resize" and node.inputs[0] in live and _rewrite_resize(node, batch):
            changed.append(node.name)
            continue
        shape = _const_input(node, 1) if node.op_type in ("Reshape", "Expand") else None
        if shape is None or shape.ndim != 1 or not shape.size or int(shape[0]) <= 0:
            continue
        new = shape.astype(np.int64).copy()
        if node.op_type == "Reshape" and node.inputs[0] in live and _rows_scaled(node, new, batch):
            changed.append(node.name)
            continue
        if int(shape[0]) != batch or (node.op_type == "Expand" and batch == 1):
            continue  # expanding to 1 row keeps the input's rows already
        if node.op_type == "Expand":
            new[0] = 1
            _replace_const(node, 1, new, f"{node.name or node.op_type}_dynamic_batch_shape")
        else:
            _rewrite_reshape(node, new)
        changed.append(node.name)
    return changed


def _data_rows(node: ir.Node, batch: int) -> int | None:
    """The static dim 0 of a Reshape's data (the symbolic batch of a graph input reads ``batch``), None if unknown."""
    shape = node.inputs[0].shape
    if shape is None or not shape.rank():
        return None
    return shape[0] if isinstance(shape[0], int) else batch if str(shape[0]) == BATCH else None


def _rows_scaled(node: ir.Node, shape: np.ndarray, batch: int) -> bool:
    """A Reshape that folds the batch into dim 0 with other rows (``[B, C, H, W] → [B·k, ...]``, MobileViT's
    patches) or unfolds it (``[B·k, n, d] → [B, k, -1]``): its dim 0 becomes the data's rows times (or divided by)
    ``k`` at run time, ``Concat(Shape(data)[0:1] · k, shape[1:])``. Reshapes that keep the batch as it is
    (``_rewrite_reshape``) are left to it; one that keeps its dim 0 copies it (``0``). False when none of these."""
    rows, target = _data_rows(node, batch), int(shape[0])
    if rows is None or rows == target == batch:
        return False
    if rows == target:  # B·k rows kept: copy them (0), right whether or not they scale with the batch
        if node.attributes.get_int("allowzero", 0) and 0 in shape[1:]:
            return False
        shape[0] = 0
        node.attributes["allowzero"] = ir.AttrInt64("allowzero", 0)
        _replace_const(node, 1, shape, f"{node.name or node.op_type}_dynamic_batch_shape")
        return True
    if target == batch and -1 in shape[1:] and rows % batch == 0:
        op, factor = "Div", rows // batch  # unfold: a -1 beside, so dim 0 cannot be -1, and 0 would copy B·k
    elif rows == batch and target % batch == 0 and target != batch:
        op, factor = "Mul", target // batch  # fold
    else:
        return False
    _runtime_dim0(node, 1, shape[1:], op, factor)
    return True


def _runtime_dim0(node: ir.Node, index: int, tail: np.ndarray, op: str | None = None, factor: int = 1) -> None:
    """Input ``index`` of ``node`` (a target shape) becomes ``Concat(Shape(data)[0:1] (op factor), tail)``, the data
    being the node's input 0: its dim 0 read at run time."""
    graph, name = node.graph, f"{node.name or node.op_type}_dynamic_batch_shape"

    def constant(suffix: str, array: np.ndarray) -> ir.Value:
        value = ir.Value(name=f"{name}_{suffix}", const_value=ir.tensor(array.astype(np.int64)),
                         type=ir.TensorType(ir.DataType.INT64), shape=ir.Shape(list(array.shape)))
        graph.initializers[value.name] = value
        return value

    added = [ir.node("Shape", [node.inputs[0]], attributes={"start": 0, "end": 1}, name=f"{name}_rows")]
    if op is not None:
        added.append(ir.node(op, [added[-1].outputs[0], constant("factor", np.array([factor]))], name=f"{name}_scaled"))
    added.append(ir.node("Concat", [added[-1].outputs[0], constant("tail", tail)], attributes={"axis": 0}, name=name))
    for new in added:
        graph.insert_before(node, new)
    node.replace_input_with(index, added[-1].outputs[0])


def _rewrite_resize(node: ir.Node, batch: int) -> bool:
    """A Resize to constant ``sizes`` that keep the data's dim 0 (bilinear upsampling of ``[1, C, H, W]``): the
    sizes read that dim 0 at run time."""
    sizes = _const_input(node, 3)
    if sizes is None or sizes.ndim != 1 or not sizes.size or _data_rows(node, batch) != int(sizes[0]):
        return False
    _runtime_dim0(node, 3, sizes[1:])
    return True


def _rewrite_reshape(node: ir.Node, shape: np.ndarray) -> None:
    """Dim 0 of a Reshape's target ``shape`` reads the data's rows: ``-1`` where no other dim is ``-1``, else
    ``0`` ("copy dim 0"). With ``allowzero=1`` (the dynamo exporter's Reshapes) a ``0`` is a literal zero and
    ONNX forbids a ``0`` beside a ``-1``: the ``0`` then comes with ``allowzero=0``, equivalent where the target
    holds no other zero (one that does, beside a ``-1``, is no valid ONNX to begin with)."""
    if -1 in shape[1:]:
        shape[0] = 0
        if node.attributes.get_int("allowzero", 0) and 0 not in shape[1:]:
            node.attributes["allowzero"] = ir.AttrInt64("allowzero", 0)
    else:
        shape[0] = -1
    _replace_const(node, 1, shape, f"{node.name or node.op_type}_dynamic_batch_shape")


def _input_dependent(model: ir.Model) -> set[ir.Value]:
    """Every value computed from a graph input (the rest is constant, whatever its nodes)."""
    live = {v for v in model.graph.inputs if not v.is_initializer()}
    for node in model.graph:
        if any(v in live for v in node.inputs if v is not None):
            live.update(node.outputs)
    return live


def _constant_shapes(model: ir.Model, values: Sequence[ir.Value]) -> dict[str, tuple[int, ...]]:
    """The shapes of values computed from constants alone (a chain of Where/ConstantOfShape that the
    folding left as it is): one ONNX Runtime run of the static graph reads them."""
    unknown = [v.name for v in values if v.shape is None or not all(isinstance(d, int) for d in v.shape)]
    shapes = {v.name: tuple(v.shape) for v in values if v.name not in unknown}
    if unknown:
        rng = np.random.default_rng(0)
        feeds = {v.name: _sample(v, int(v.shape[0]) if v.shape is not None and v.shape.rank() else 0, rng)
                 for v in model.graph.inputs if not v.is_initializer()}
        arrays = ort_session(model, extra_outputs=unknown, providers=["CPUExecutionProvider"]).run(unknown, feeds)
        shapes.update({name: tuple(a.shape) for name, a in zip(unknown, arrays, strict=True)})
    return shapes


def _expand_constant_rows(model: ir.Model, batch: int, names: set[str]) -> None:
    """A constant operand of ``batch`` rows of a Concat beside a batched operand (ViT's class token) is
    expanded to that operand's rows: ``Expand(c, Concat(Shape(x)[:1], ones))``. Needs inferred shapes."""
    graph = model.graph
    live = _input_dependent(model)
    sites = []
    for node in list(graph):
        axis = node.attributes.get_int("axis", 0) if node.op_type == "Concat" else 0
        batched = next((v for v in node.inputs if v is not None and v in live), None)
        if node.op_type == "Concat" and axis != 0 and batched is not None:
            sites += [(node, index, value, batched) for index, value in enumerate(node.inputs)
                      if value is not None and value not in live]
    shapes = _constant_shapes(model, [value for _, _, value, _ in sites])
    for node, index, value, batched in sites:
        shape = ir.Shape(list(shapes[value.name]))
        if not shape.rank() or shape[0] != batch:
            continue
        if _is_row_index(node, index, value, batch):
            node.replace_input_with(index, _row_numbers(node, index, batched, shape.rank()))
            names.add(node.name)
            continue
        _expand_to_rows(node, index, value, batched, shape.rank())
        names.add(node.name)


def _expand_to_rows(node: ir.Node, index: int, value: ir.Value, batched: ir.Value, rank: int) -> None:
    """``node``'s input ``index`` (``value``, one row) becomes ``Expand(value, Concat(Shape(batched)[:1], ones))``."""
    graph = node.graph
    rows = ir.node("Shape", [batched], attributes={"start": 0, "end": 1}, name=f"{node.name}_rows_{index}")
    ones = ir.Value(name=f"{node.name}_ones_{index}", const_value=ir.tensor(np.ones(rank - 1, np.int64)),
                    type=ir.TensorType(ir.DataType.INT64), shape=ir.Shape([rank - 1]))
    graph.initializers[ones.name] = ones
    target = ir.node("Concat", [rows.outputs[0], ones], attributes={"axis": 0}, name=f"{node.name}_target_{index}")
    expand = ir.node("Expand", [value, target.outputs[0]], name=f"{node.name}_expand_{index}")
    for new in (rows, target, expand):
        graph.insert_before(node, new)
    node.replace_input_with(index, expand.outputs[0])


def _expand_gather_elements_tables(model: ir.Model, batch: int, names: set[str]) -> None:
    """A ``GatherElements`` (axis not 0) whose data is a constant of one row and whose indices are batched
    (RoBERTa's token types: ``gather(buffer.expand(batch, -1), 1, positions)`` exported at batch 1) reads its
    data expanded to the indices' rows: GatherElements does not broadcast."""
    live = _input_dependent(model)
    sites = [node for node in model.graph if node.op_type == "GatherElements" and batch == 1
             and node.attributes.get_int("axis", 0) != 0 and node.inputs[0] not in live and node.inputs[1] in live]
    shapes = _constant_shapes(model, [node.inputs[0] for node in sites])
    for node in sites:
        shape = shapes[node.inputs[0].name]
        if len(shape) > 1 and shape[0] == 1:
            _expand_to_rows(node, 0, node.inputs[0], node.inputs[1], len(shape))
            names.add(node.name)


def _is_row_index(concat: ir.Node, index: int, value: ir.Value, batch: int) -> bool:
    """The constant is ``arange(batch)``, the first component of a ``GatherND``'s indices (``batch_dims=0``): it
    picks row i of the data for row i (``hidden[torch.arange(b), ids.argmax(-1)]``, CLIP's pooled output), so it
    must count the batch's rows, not repeat the exported ones."""
    array = constant_value(value)
    if index != 0 or array is None or not np.issubdtype(array.dtype, np.integer) or array.size != batch:
        return False
    if not np.array_equal(array.reshape(-1), np.arange(batch)) or array.shape[0] != batch:
        return False
    rank = len(array.shape)
    if concat.attributes.get_int("axis", 0) not in (-1, rank - 1):
        return False
    users = [use.node for use in concat.outputs[0].uses()]
    return bool(users) and all(user.op_type == "GatherND" and user.inputs[1] is concat.outputs[0]
                               and user.attributes.get_int("batch_dims", 0) == 0 for user in users)


def _row_numbers(concat: ir.Node, index: int, batched: ir.Value, rank: int) -> ir.Value:
    """``Range(0, rows of batched)`` shaped ``[rows, 1, ...]`` (``rank`` dims), inserted before ``concat``."""
    graph, name = concat.graph, f"{concat.name}_row_numbers_{index}"

    def constant(suffix: str, array: np.ndarray) -> ir.Value:
        value = ir.Value(name=f"{name}_{suffix}", const_value=ir.tensor(array, name=f"{name}_{suffix}"),
                         type=ir.TensorType(ir.DataType.INT64), shape=ir.Shape(list(array.shape)))
        graph.initializers[value.name] = value
        return value

    shape = ir.node("Shape", [batched], name=f"{name}_shape")
    rows = ir.node("Gather", [shape.outputs[0], constant("dim0", np.array(0, np.int64))], name=f"{name}_rows")
    numbers = ir.node("Range", [constant("start", np.array(0, np.int64)), rows.outputs[0],
                                constant("step", np.array(1, np.int64))], name=f"{name}_range")
    column = ir.node("Reshape", [numbers.outputs[0], constant("target", np.array([-1] + [1] * (rank - 1), np.int64))],
                     name=name)
    for added in (shape, rows, numbers, column):
        graph.insert_before(concat, added)
    return column.outputs[0]


def _forget_shapes(model: ir.Model) -> None:
    """Intermediate shapes the exporter recorded at the old batch would contradict inference: dropped, in the
    subgraphs too (an ``If`` whose branches still say ``[1, 32]`` would pin its output's batch)."""
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        for value in node.outputs:
            if not (value.is_graph_output() and value.graph is model.graph):
                value.shape = None


def _pinning_node(model: ir.Model) -> str:
    """The first node (in order) whose inputs carry the symbolic batch and whose outputs have lost it."""
    for node in model.graph:
        has = any(v is not None and v.shape is not None and v.shape.rank() and not isinstance(v.shape[0], int)
                  for v in node.inputs)
        lost = [v for v in node.outputs if v.shape is not None and v.shape.rank() and isinstance(v.shape[0], int)]
        if has and lost and node.op_type not in ("Shape", "Size"):
            return f"{node.name or '(unnamed)'} ({node.op_type})"
    return "(not found)"


def make_batch_dynamic(model: ir.Model, batched: Sequence[str] | None = None) -> ir.Model:
    """``model`` (in place) with a symbolic batch, checked by shape inference and proven in ONNX Runtime."""
    infer_shapes(model)  # the static graph's shapes: which constant operands carry the old batch
    inputs, batch = _batched_inputs(model, batched)
    outputs = [v for v in model.graph.outputs if v.shape is not None and v.shape.rank() and v.shape[0] == batch]
    changed: set[str] = set()
    _expand_constant_rows(model, batch, changed)  # reads the static graph once in ONNX Runtime
    _expand_gather_elements_tables(model, batch, changed)
    for value in inputs:
        _set_dim0(value, ir.SymbolicDim(BATCH))
    changed.update(_rewrite_shapes(model, batch))
    _forget_shapes(model)
    for value in outputs:
        _set_dim0(value, None)
    failure = infer_shapes(model)
    if failure is not None:
        raise BatchPinned(f"{_flag()}: the graph rewritten to a dynamic batch fails ONNX shape inference "
                          f"({failure}): the rewrite does not cover this graph; build it at its own batch "
                          f"(leave out {_flag()}), or export it with a dynamic batch")
    pinned = [v.name for v in outputs if v.shape is not None and isinstance(v.shape[0], int)]
    if pinned:
        raise BatchPinned(f"{_flag()}: node {_pinning_node(model)} pins the batch (output(s) {pinned} keep dim 0 "
                          f"= {batch}); build it at its own batch (leave out {_flag()}), or export it with a dynamic batch")
    for value in outputs:
        _set_dim0(value, ir.SymbolicDim(BATCH))
    prove_rows(model, inputs, batch)
    return model


def _sample(value: ir.Value, rows: int, rng: np.random.Generator) -> np.ndarray:
    """Inputs for the proof: ``rows`` on dim 0 (none for a rank-0 input), other dims as fixed (1 if not)."""
    dims = [rows, *(d if isinstance(d, int) else 1 for d in list(value.shape)[1:])] if value.shape else []
    dtype = value.dtype.numpy() if value.dtype is not None else np.dtype(np.float32)
    if np.issubdtype(dtype, np.floating):
        return rng.standard_normal(dims).astype(dtype)
    if not np.issubdtype(dtype, np.integer):
        return np.zeros(dims, dtype)  # flags
    rows = table_rows(value)  # token ids: distinct rows within their table, never 0 (equal rows hide row mixing)
    if rows is not None and rows > 2:
        return rng.integers(1, rows, dims).astype(dtype)
    return np.ones(dims, dtype)  # masks, and ids of a table this cannot see: 1 is valid for both


def prove_rows(model: ir.Model, inputs: Sequence[ir.Value], batch: int) -> None:
    """ONNX Runtime at ``PROOF_ROWS`` rows equals each row run alone (``batch`` rows each when > 1)."""
    rng = np.random.default_rng(0)
    rows = PROOF_ROWS * batch
    batched = {v.name for v in inputs}
    feeds = {v.name: _sample(v, rows if v.name in batched else int(v.shape[0]) if v.shape and v.shape.rank()
                             and isinstance(v.shape[0], int) else 1, rng)
             for v in model.graph.inputs if not v.is_initializer()}
    session = ort_session(model, providers=["CPUExecutionProvider"])
    try:
        together = session.run(None, feeds)
        alone = [session.run(None, {k: v[i * batch:(i + 1) * batch] if k in batched else v for k, v in feeds.items()})
                 for i in range(PROOF_ROWS)]
    except Exception as exc:  # noqa: BLE001 - ONNX Runtime names the failing node in its message
        node = re.search(r"node\. Name:'([^']*)'", str(exc))
        raise BatchPinned(f"{_flag()}: ONNX Runtime cannot run the graph at batch {rows}: node "
                          f"{node.group(1) if node else '(unnamed)'} pins the batch ({str(exc).splitlines()[0][:200]}); "
                          f"build it at its own batch (leave out {_flag()}), or export it with a dynamic batch") from exc
    names = [v.name for v in model.graph.outputs]
    for name, whole, parts in zip(names, together, zip(*alone, strict=True), strict=True):
        if whole.ndim == 0 or whole.shape[0] != rows:
            raise BatchPinned(f"{_flag()}: output {name!r} has shape {list(whole.shape)} at batch {rows}, not "
                              f"{rows} rows: the graph mixes its rows; build it at its own batch (leave out {_flag()}), or export it with a dynamic batch")
        expected = np.concatenate(parts).astype(np.float64)
        scale = max(float(np.abs(expected).max(initial=0.0)), 1.0)
        worst = float(np.abs(whole.astype(np.float64) - expected).max(initial=0.0)) / scale
        if not worst <= PROOF_TOLERANCE:
            raise BatchPinned(f"{_flag()}: at batch {rows}, output {name!r} differs from the rows run one batch "
                              f"at a time (relative {worst:.2g}): a node mixes rows across the batch; export the "
                              "model with a dynamic batch instead")
