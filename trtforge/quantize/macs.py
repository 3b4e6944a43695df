"""Multiply-accumulates of one quantizer candidate, from its weight and the observed shapes.

Example:
    >>> layer_macs(candidate, values_by_name(model.graph), {"conv_out": (8, 32, 56, 56)})
    903168
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from trtforge.passes.graph import attr, constant_value
from trtforge.quantize.placement import Candidate


def layer_macs(c: Candidate, values: dict[str, ir.Value], shapes: dict[str, tuple[int, ...]]) -> int:
    """Per-sample MACs of ``c``; ``values`` maps names to the graph's values (``values_by_name``)."""
    out = shapes.get(c.output)
    if not out:
        return 0
    per_sample = int(np.prod(out[1:])) if len(out) > 1 else int(np.prod(out))
    w = constant_value(values[c.weight[1]]) if c.weight is not None else None
    if c.op_type == "Conv":
        return per_sample * int(np.prod(w.shape[1:]))
    if c.op_type == "ConvTranspose":
        inp = shapes.get(c.activations[0][1], ())
        return int(np.prod(inp[1:])) * int(np.prod(w.shape[1:])) if inp else 0
    if w is not None and c.op_type == "Gemm":
        node = values[c.output].producer()
        k = w.shape[1] if (c.weight[0] == 1 and attr(node, "transB", 0)) else w.shape[0]
        return per_sample * int(k)
    a = shapes.get(c.activations[0][1])
    if c.activations[0][0] == 0 and a:
        return per_sample * int(a[-1])
    if w is not None:
        return per_sample * int(w.shape[-2] if w.ndim >= 2 else w.shape[0])
    return 0
