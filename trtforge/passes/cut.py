"""Cut a graph at named tensors (``outputs=`` / ``--outputs NAME[,NAME]``), as Polygraphy's ``surgeon extract``.

The named tensors become the graph's outputs, in the order given; nodes no output needs any more go (a
detector's data-dependent post-processing, ``NonZero``/``NonMaxSuppression``, that TensorRT-RTX cannot
build), and so do the initializers only they read. Shapes are inferred so the new outputs carry their types.

Example:
    >>> model = load_ir(Path("ssd.onnx"))
    >>> cut_graph(model, ("boxes", "scores"))      # nodes removed
    12
    >>> [v.name for v in model.graph.outputs]
    ['boxes', 'scores']
"""

from __future__ import annotations

import difflib

import onnx_ir as ir
import onnx_ir.passes.common as common

from trtforge.core.errors import InvalidArgument, spelled
from trtforge.passes.graph import infer_shapes, values_by_name


def cut_graph(model: ir.Model, names: tuple[str, ...]) -> int:
    """``model`` (changed in place) ends at the tensors ``names``; returns how many nodes went.

    A name that is no tensor of the graph is refused, with the closest names, before anything changes.
    """
    graph = model.graph
    values = values_by_name(graph)
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise InvalidArgument(f"{spelled(cli='--outputs', python='outputs=')} names {', '.join(map(repr, twice))} "
                              "more than once; name each tensor once")
    for name in names:
        if name not in values or values[name].is_initializer():
            near = difflib.get_close_matches(name, [n for n, v in values.items() if not v.is_initializer()], 3)
            hint = f"close names: {', '.join(near)}" if near else f"the graph's outputs are {', '.join(o.name for o in graph.outputs)}"
            raise InvalidArgument(f"{spelled(cli='--outputs', python='outputs=')} {name!r} is no tensor of the graph "
                                  f"({hint}); name computed tensors, e.g. from Netron or `trtforge inspect`")
    before = sum(1 for _ in graph.all_nodes())
    graph.outputs.clear()
    graph.outputs.extend(values[name] for name in names)
    common.RemoveUnusedNodesPass()(model)
    if any(v.dtype is None or v.shape is None for v in graph.outputs):
        infer_shapes(model)
    return before - sum(1 for _ in graph.all_nodes())
