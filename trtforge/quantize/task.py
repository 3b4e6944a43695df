"""Which kind of model is being quantized: it picks the accuracy metrics and the default error budget.

Example:
    >>> detect_task(load_ir(Path("efficientnet_lite0.onnx")))
    'classification'
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir

from trtforge.passes.graph import attr, input_specs, load_ir

#: Ops between an L2 norm and the Div that applies it (clamping, broadcasting).
_NORM_PATH_OPS = frozenset({"Clip", "Max", "Expand", "Unsqueeze", "Reshape", "Cast", "Add", "Sqrt", "Identity"})


def _l2_normalised(output: ir.Value) -> bool:
    """Whether ``output`` is LpNormalization(p=2), or x / ‖x‖₂ (ReduceL2, or Sqrt of a sum of squares)."""
    node = output.producer()
    if node is None:
        return False
    if node.op_type == "LpNormalization":
        return attr(node, "p", 2) == 2
    if node.op_type != "Div" or len(node.inputs) < 2:
        return False
    frontier, seen = [node.inputs[1]], set()
    while frontier:
        value = frontier.pop()
        n = value.producer() if value is not None else None
        if n is None or n.name in seen:
            continue
        seen.add(n.name)
        if n.op_type in ("ReduceL2", "ReduceSumSquare"):
            return True
        if n.op_type in _NORM_PATH_OPS:
            frontier.extend(i for i in n.inputs[:1] if i is not None and i.name)
    return False


def output_dims(model: ir.Model) -> tuple:
    """The dims of the first graph output (ints, symbolic dims as they are), () when unknown."""
    shape = model.graph.outputs[0].shape
    return tuple(shape) if shape is not None else ()


def detect_task(model: ir.Model | onnx.ModelProto, task: str = "auto") -> str:
    """classification (image in, N×classes out), embedding (an L2-normalised N×D output), or other.

    Example:
        >>> detect_task(onnx.load("efficientnet_lite0.onnx"))
        'classification'
    """
    if task != "auto":
        return task
    model = load_ir(model)
    specs = input_specs(model)
    out = output_dims(model)
    image_input = len(specs) == 1 and len(specs[0][2]) == 4 and specs[0][1].kind == "f"
    if image_input and len(out) == 2 and isinstance(out[1], int) and out[1] >= 5:
        return "classification"
    if len(model.graph.outputs) == 1 and len(out) == 2 and _l2_normalised(model.graph.outputs[0]):
        return "embedding"
    return "other"


def task_of_outputs(inputs: list[np.ndarray], outputs: list[np.ndarray], task: str = "auto") -> str:
    """``detect_task`` where there is no graph (the direct path): from one batch of inputs and the FP32
    outputs; an embedding is a single N×D output whose rows have unit L2 norm.

    Example:
        >>> task_of_outputs([np.zeros((2, 3, 224, 224), np.float32)], [np.zeros((2, 1000), np.float32)])
        'classification'
    """
    if task != "auto":
        return task
    out = outputs[0].shape if outputs else ()
    image_input = len(inputs) == 1 and inputs[0].ndim == 4 and inputs[0].dtype.kind == "f"
    if image_input and len(out) == 2 and out[1] >= 5:
        return "classification"
    if len(outputs) == 1 and len(out) == 2 and np.allclose(np.linalg.norm(outputs[0], axis=-1), 1.0, atol=1e-3):
        return "embedding"
    return "other"
