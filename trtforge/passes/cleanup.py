"""General cleanup before precision work: constant folding, BatchNorm folding, no-op removal.

Every step keeps the graph's meaning: onnx_ir's IdentityEliminationPass made a Scan body return one
value twice (``test_scan9_sum`` then read garbage), so identities go through ``eliminate_identities``.

Example:
    >>> model = cleanup(load_ir(Path("m.onnx")))
"""

from __future__ import annotations

import logging

import onnx_ir as ir
import onnx_ir.passes.common as common
import onnxscript.optimizer
import onnxscript.rewriter
from onnxscript.rewriter.rules import common as rules

#: Rewrites that make the graph smaller without changing its numbers (beyond float rounding).
CLEANUP_RULES = (
    rules.fuse_batchnorm_into_conv_rule,
    rules.fuse_batchnorm_into_conv_transpose_rule,
    rules.fuse_batchnorm_into_gemm_rule,
    rules.no_op_cast_rule,
    rules.no_op_expand_rule,
    rules.no_op_transpose_rule,
    rules.dropout_inference_rule,
)

log = logging.getLogger(__name__)


def removable_identity(node: ir.Node) -> bool:
    """Whether removing ``y = Identity(x)`` keeps the graph's meaning.

    Not when ``y`` is a graph output (of the main graph or a Scan/Loop/If body) and ``x`` is a graph
    input, an outer-scope value, or another output of the same graph: the graph would return one
    value twice (a Scan body's state and scan output) or rename a value another graph reads.
    """
    if node.op_type != "Identity" or node.domain not in ("", "ai.onnx") or len(node.inputs) != 1:
        return False
    source, out = node.inputs[0], node.outputs[0]
    if source is None:
        return False
    if not out.is_graph_output():
        return True
    producer = source.producer()
    return producer is not None and producer.graph is node.graph and not source.is_graph_output()


def eliminate_identities(model: ir.Model) -> ir.Model:
    """Drop the Identity nodes ``removable_identity`` allows, in every graph and subgraph (in place).

    Example:
        >>> eliminate_identities(load_ir(Path("scan.onnx")))   # the Scan body's Identity output stays
    """
    for node in list(ir.traversal.RecursiveGraphIterator(model.graph)):
        if not removable_identity(node):
            continue
        source, out = node.inputs[0], node.outputs[0]
        if source.type is None:
            source.type = out.type
        if source.shape is None:
            source.shape = out.shape
        was_output = out.is_graph_output()
        ir.convenience.replace_all_uses_with(out, source, replace_graph_outputs=True)
        if was_output:
            source.name = out.name
        node.graph.remove(node, safe=True)
    return model


def keep_public_names(model: ir.Model) -> list[str]:
    """The graph's input names stay what users call the engine with (onnx_ir's OutputFixPass would rename
    an input that is also an output ``x`` → ``x_orig``, and a second listing of an output ``y_alias_1``).

    An output listed twice is given once (a name maps to one array); an input returned as it is becomes
    the output ``<name>_output`` of an Identity (TensorRT names each tensor once), so ``engine(x=...)``
    still works. Returns one line per change (also logged as a warning).

    Example:
        >>> keep_public_names(model)   # inputs [x], outputs [x, y, y]
        ["output 'x' is the input 'x' returned as it is; ...", "output 'y' is listed 2 times; ..."]
    """
    graph, lines = model.graph, []
    outputs = list(graph.outputs)
    for value in dict.fromkeys(outputs):
        if outputs.count(value) > 1:
            lines.append(f"output {value.name!r} is listed {outputs.count(value)} times; the engine gives it once")
    unique = list(dict.fromkeys(outputs))
    taken = {v.name for v in graph.inputs} | {v.name for n in graph for v in n.outputs} | set(graph.initializers)
    for index, value in enumerate(unique):
        if not value.is_graph_input():
            continue
        name = f"{value.name}_output"
        while name in taken:
            name += "_"
        node = ir.node("Identity", inputs=[value], name=f"trtforge_passthrough_{index}")
        node.outputs[0].name, node.outputs[0].type, node.outputs[0].shape = name, value.type, value.shape
        graph.append(node)
        unique[index] = node.outputs[0]
        taken.add(name)
        lines.append(f"output {value.name!r} is the input {value.name!r} returned as it is; TensorRT names each "
                     f"tensor once, so the engine's input keeps the name {value.name!r} and gives that output "
                     f"as {name!r}")
    if unique != outputs:
        graph.outputs.clear()
        graph.outputs.extend(unique)
    for line in lines:
        log.warning(line)
    return lines


def orphan_inputs(model: ir.Model) -> list[tuple[ir.Value, ir.Node]]:
    """Node inputs (any graph, subgraphs included) that no graph defines: not a graph input, not an
    initializer, not a node's output. A valid graph has none; ``[(value, first node using it), ...]``.

    Example:
        >>> [(v.name, n.name) for v, n in orphan_inputs(model)]
        [('r/shape_1', 'node_Reshape_1')]
    """
    defined: set[ir.Value] = set()
    for graph in model.graphs():
        defined.update(graph.inputs)
        defined.update(graph.initializers.values())
        for node in graph:
            defined.update(node.outputs)
    found: dict[ir.Value, ir.Node] = {}
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        for value in node.inputs:
            if value is not None and value not in defined:
                found.setdefault(value, node)
    return list(found.items())


def adopt_orphan_constants(model: ir.Model) -> list[str]:
    """Register as main-graph initializers the constants a rewrite left unregistered (in place); their names.

    onnxscript's Flatten→Reshape rule names the new shape ``{input}/shape``: two Flattens of one tensor
    (``torch.flatten(f, 1)`` and ``torch.flatten(f, 0, -2)``) make two such initializers, the second replaces
    the first in the graph's table, and the first Reshape reads a constant no graph defines (onnx_ir then
    refuses to copy the model, ONNX Runtime and TensorRT to load it). A value without a constant is a bug
    in a pass: refused here, named, before anything else reads the graph.
    """
    from trtforge.core.errors import InternalError

    orphans = orphan_inputs(model)
    lost = [(value, node) for value, node in orphans if value.const_value is None]
    if lost:
        value, node = lost[0]
        raise InternalError(f"the cleanup passes left value {value.name!r} (read by node {node.name!r}, "
                            f"{node.op_type}) undefined: neither a graph input, an initializer nor a node output")
    taken = {v.name for graph in model.graphs() for v in [*graph.inputs, *graph.initializers.values()]}
    taken |= {v.name for node in ir.traversal.RecursiveGraphIterator(model.graph) for v in node.outputs}
    adopted = []
    for value, _ in orphans:
        name = value.name or "constant"
        while name in taken:
            name += "_"
        value.name = name
        taken.add(name)
        model.graph.register_initializer(value)
        adopted.append(name)
    return adopted


def fold_constant_training_batchnorms(model: ir.Model) -> list[str]:
    """Fold each main-graph ``BatchNormalization(training_mode=1)`` whose inputs are all constants and whose
    running-stat outputs nobody reads into the constant it computes (in place); the folded nodes' names.

    TorchScript writes weight standardization (``F.batch_norm(w, None, None, training=True)``, transformers'
    BiT) so: the conv weights pass through a training-mode BatchNormalization, which TensorRT's parser refuses
    and onnxscript's folding skips (three outputs). The batch statistics are those of ONNX's definition: mean
    and population variance over every axis but 1.

    Example:
        >>> fold_constant_training_batchnorms(model)
        ['/model/embedder/convolution/BatchNormalization']
    """
    import numpy as np

    folded = []
    for node in list(model.graph):
        arrays = [v.const_value.numpy() if v is not None and v.const_value is not None else None for v in node.inputs]
        if (node.op_type != "BatchNormalization" or node.domain not in ("", "ai.onnx")
                or node.attributes.get_int("training_mode", 0) != 1 or any(a is None for a in arrays[:3])
                or any(o.uses() or o.is_graph_output() for o in node.outputs[1:]) or node.outputs[0].is_graph_output()):
            continue
        x, scale, bias = (np.asarray(a, np.float64) for a in arrays[:3])
        axes = tuple(i for i in range(x.ndim) if i != 1)
        column = (1, -1) + (1,) * (x.ndim - 2)
        eps = node.attributes.get_float("epsilon", 1e-5)
        y = (x - x.mean(axes, keepdims=True)) / np.sqrt(x.var(axes, keepdims=True) + eps)
        y = (y * scale.reshape(column) + bias.reshape(column)).astype(arrays[0].dtype)
        out = node.outputs[0]
        value = ir.Value(name=out.name, const_value=ir.tensor(y, name=out.name), type=out.type, shape=ir.Shape(y.shape))
        out.name = f"{out.name}_folded"
        ir.convenience.replace_all_uses_with(out, value)
        model.graph.register_initializer(value)
        model.graph.remove(node, safe=True)
        folded.append(node.name)
    return folded


def cleanup(model: ir.Model) -> ir.Model:
    """Fold constants and BatchNorms, drop no-ops and identities; returns the same model object."""
    keep_public_names(model)
    onnxscript.optimizer.optimize_ir(model)
    if fold_constant_training_batchnorms(model):  # their inputs are constants once folded; fold what follows
        onnxscript.optimizer.optimize_ir(model)
    adopt_orphan_constants(model)
    onnxscript.rewriter.rewrite(model, pattern_rewrite_rules=list(CLEANUP_RULES))
    adopt_orphan_constants(model)
    eliminate_identities(model)
    common.RemoveUnusedNodesPass()(model)
    common.TopologicalSortPass()(model)
    return model
