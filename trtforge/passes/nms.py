"""Fixed-shape NMS written as ONNX nodes after a detector's raw head (``postprocess=trtforge.NMS(...)``).

TensorRT-RTX parses ``NonMaxSuppression`` but cannot build it, and its data-dependent output needs an output
allocator anyway; every op here has a fixed shape, so every TensorRT flavour, ONNX Runtime and CUDA graphs
run it. The graph (``trtforge.core.postprocess`` states the semantics):

1. decode the head to ``boxes (N, A, 4)`` x1, y1, x2, y2 and ``scores (N, A, C)``; each box takes its best
   class (TopK 1: the lowest class index on a tie, as ``argmax``);
2. TopK of the ``candidates`` best scores above the threshold (the rest masked to -1): sorted candidates; a
   head with fewer (or a dynamic number of) anchors is padded with boxes that never pass, so the shapes after
   this step are always ``(N, candidates)``;
3. their IoU matrix (torchvision's ``box_iou`` arithmetic, FP32), ``S[i, j]`` = candidate ``i`` would
   suppress ``j``: ``i < j``, IoU > ``iou_threshold``, same class (class-aware by a same-class mask: the
   same rule as ``batched_nms``'s coordinate offsets, without the rounding those offsets add to FP32 boxes);
4. iterated matrix suppression (Cluster-NMS, Zheng et al. 2020): ``keep ← valid ∧ ¬(keepᵀ S)``, starting from
   every valid candidate. After ``t`` rounds every candidate at the end of a suppression chain (candidates each
   of which would suppress the next) of at most ``t`` links is decided exactly as greedy NMS decides it, so
   the result is greedy NMS's exactly when no chain among the candidates has more than ``NMS_ROUNDS`` links
   (16, unrolled; tests/detect/test_nms.py shows 16 links exact and 17 not). Measured: ultralytics'
   YOLOv8n/11n/v5nu on 16 letterboxed photos, 1000 candidates, score threshold down to 0.001: at most 11;
5. the first ``max_detections`` survivors by descending score (TopK of a rank that is ``K - position`` for a
   survivor and 0 otherwise), padded with zeros: ``num_detections (N, 1) int32``, ``detection_boxes (N, K, 4)``,
   ``detection_scores (N, K)``, ``detection_classes (N, K) int32`` (EfficientNMS's convention).

Every node is named ``NMS_PREFIX...``; the float pass keeps them in FP32 by rule. The PyTorch routes run the
model's module, not this graph, and append the same algorithm written in PyTorch (``trtforge.runtime.torch_nms``:
the runtime never imports the passes); tests/detect/test_torch_nms.py shows both give identical outputs.

Example:
    >>> model = load_ir(Path("yolov8n.onnx"))
    >>> append_nms(model, NMS("yolo", max_detections=100))
    >>> [v.name for v in model.graph.outputs]
    ['num_detections', 'detection_boxes', 'detection_scores', 'detection_classes']
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_ir as ir
from onnx_ir.tape import Tape

from trtforge.core.errors import InvalidArgument, spelled
from trtforge.core.postprocess import NMS, NMS_OUTPUTS, NMS_PREFIX, NMS_ROUNDS


@dataclass(frozen=True)
class Head:
    """The raw head outputs the NMS reads, and the anchors and classes their shapes say."""

    values: tuple[ir.Value, ...]
    anchors: int | None  # None: dynamic
    classes: int


def _dims(value: ir.Value) -> tuple[int | str | None, ...] | None:
    if value.shape is None:
        return None
    return tuple(d if isinstance(d, int) else None for d in value.shape)


def infer_output_dims(model: ir.Model) -> None:
    """Static output dims that ONNX shape inference with data propagation finds where the exporter declared
    names: the TorchScript exporter names every dim of a dynamic YOLO export's ``output0`` (``Concatoutput0_dim_1``
    for the 84 channels too). The model's outputs get the static dims found; the others stay as they were."""
    import onnx

    proto = ir.serde.serialize_model(model)
    for output in proto.graph.output:
        output.type.tensor_type.ClearField("shape")
    try:
        inferred = onnx.shape_inference.infer_shapes(proto, data_prop=True)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError):  # the declared dims stay
        return
    for value, found in zip(model.graph.outputs, inferred.graph.output, strict=True):
        dims = [d.dim_value if d.HasField("dim_value") else None for d in found.type.tensor_type.shape.dim]
        if value.shape is not None and len(dims) == len(value.shape):
            value.shape = ir.Shape([new if new is not None else old for new, old in zip(dims, value.shape, strict=True)])


def _describe(values: list[ir.Value]) -> str:
    return ", ".join(f"{v.name} {tuple(_dims(v) or ('?',))}".replace("None", "N") for v in values)


def _refuse(nms: NMS, outputs: list[ir.Value], why: str) -> InvalidArgument:
    cut = spelled(cli="--outputs NAME[,NAME]", python="outputs=[...]")
    return InvalidArgument(f"the model's outputs ({_describe(outputs)}) do not match head layout {nms.head!r}: {why}; "
                           f"choose the head that matches (yolo, yolov5, boxes-scores) or cut the graph with {cut}")


def find_head(graph: ir.Graph, nms: NMS) -> Head:
    """The head outputs ``nms.head`` names, checked against their shapes (one line naming the fix if not).

    The channel dims must be static; the anchors may be dynamic (a detector exported with dynamic image sizes).
    """
    outputs = list(graph.outputs)
    dims = [_dims(v) for v in outputs]
    if any(d is None or len(d) != 3 for d in dims):
        raise _refuse(nms, outputs, "each head output must be rank 3")
    if nms.head in ("yolo", "yolov5"):
        if len(outputs) != 1:
            raise _refuse(nms, outputs, f"{nms.head} reads one output, the model has {len(outputs)}")
        _, d1, d2 = dims[0]
        yolo = nms.head == "yolo"
        channels, anchors = (d1, d2) if yolo else (d2, d1)
        if channels is None or channels <= (4 if yolo else 5) or (anchors is not None and anchors <= channels):
            other = d2 if yolo else d1  # the dim the other layout reads its channels from
            hint = ("; (N, A, 5+C) is yolov5's" if yolo else "; (N, 4+C, A) is yolo's") \
                if other is not None and (channels is None or other < channels) else ""
            raise _refuse(nms, outputs, ("yolo is (N, 4+C, A)" if yolo else "yolov5 is (N, A, 5+C)")
                          + " with static channels, fewer than the anchors" + hint)
        return Head((outputs[0],), anchors, channels - (4 if yolo else 5))
    if len(outputs) != 2:
        raise _refuse(nms, outputs, f"boxes-scores reads two outputs, boxes (N, A, 4) and scores (N, A, C); "
                      f"the model has {len(outputs)}")
    boxes, scores = outputs if dims[0][2] == 4 else outputs[::-1]  # 4 classes and 4 coordinates: boxes first
    (_, a, four), (_, a_scores, classes) = _dims(boxes), _dims(scores)
    if four != 4 or classes is None or (a is not None and a_scores is not None and a != a_scores):
        raise _refuse(nms, outputs, "boxes-scores is boxes (N, A, 4) and scores (N, A, C), the same A, C static")
    return Head((boxes, scores), a if a is not None else a_scores, classes)


class _Writer:
    """A tape whose nodes and constants are all named ``NMS_PREFIX...``."""

    def __init__(self) -> None:
        self.tape = Tape()
        self.count = 0

    def name(self, what: str) -> str:
        self.count += 1
        return f"{NMS_PREFIX}{what}_{self.count}"

    def op(self, op_type: str, *inputs: ir.Value, **attributes) -> ir.Value:
        name = self.name(op_type)
        return self.tape.op(op_type, list(inputs), attributes or None, name=name,
                            output=ir.Value(name=name + "_out"))

    def ops(self, op_type: str, *inputs: ir.Value, n: int, **attributes) -> tuple[ir.Value, ...]:
        name = self.name(op_type)
        outputs = [ir.Value(name=f"{name}_out{i}") for i in range(n)]
        return tuple(self.tape.op_multi_out(op_type, list(inputs), attributes or None, name=name, outputs=outputs))

    def const(self, array: np.ndarray | float | int | list, dtype=np.float32) -> ir.Value:
        name = self.name("const")
        return self.tape.initializer(ir.tensor(np.asarray(array, dtype), name=name), name=name)

    def slice(self, value: ir.Value, start: int, end: int, axis: int) -> ir.Value:
        return self.op("Slice", value, self.const([start], np.int64), self.const([end], np.int64),
                       self.const([axis], np.int64))


def _decode(w: _Writer, head: Head, nms: NMS) -> tuple[ir.Value, ir.Value]:
    """boxes (N, A, 4) as x1, y1, x2, y2 and scores (N, A, C), FP32, from the head's outputs."""
    values = [v if v.dtype in (None, ir.DataType.FLOAT) else w.op("Cast", v, to=int(ir.DataType.FLOAT))
              for v in head.values]  # a model exported in FP16: the NMS computes in FP32 all the same
    if nms.head == "boxes-scores":
        return values[0], values[1]
    raw = values[0]
    rows = w.op("Transpose", raw, perm=[0, 2, 1]) if nms.head == "yolo" else raw  # (N, A, 4+C | 5+C)
    first = 4 if nms.head == "yolo" else 5
    scores = w.slice(rows, first, first + head.classes, 2)
    if nms.head == "yolov5":
        scores = w.op("Mul", scores, w.slice(rows, 4, 5, 2))  # class score × objectness
    centre, half = w.slice(rows, 0, 2, 2), w.op("Mul", w.slice(rows, 2, 4, 2), w.const(0.5))
    return w.op("Concat", w.op("Sub", centre, half), w.op("Add", centre, half), axis=2), scores


def _suppression(w: _Writer, boxes: ir.Value, classes: ir.Value, nms: NMS, k: int) -> ir.Value:
    """``S (N, K, K)`` float: 1 where sorted candidate i would suppress candidate j."""
    coords = [w.slice(boxes, i, i + 1, 2) for i in range(4)]  # (N, K, 1) each
    rows = [w.op("Transpose", c, perm=[0, 2, 1]) for c in coords]  # (N, 1, K)
    x1, y1, x2, y2 = (w.op(op, c, r) for op, c, r in zip(("Max", "Max", "Min", "Min"), coords, rows, strict=True))
    zero = w.const(0.0)
    inter = w.op("Mul", w.op("Max", w.op("Sub", x2, x1), zero), w.op("Max", w.op("Sub", y2, y1), zero))
    area = w.op("Mul", w.op("Sub", coords[2], coords[0]), w.op("Sub", coords[3], coords[1]))
    union = w.op("Sub", w.op("Add", area, w.op("Transpose", area, perm=[0, 2, 1])), inter)
    over = w.op("Greater", w.op("Div", inter, union), w.const(nms.iou_threshold))
    position = np.arange(k, dtype=np.float32)
    before = w.op("Less", w.const(position.reshape(k, 1)), w.const(position.reshape(1, k)))  # i < j
    rule = w.op("And", over, before)
    if not nms.class_agnostic:
        column = w.op("Unsqueeze", classes, w.const([2], np.int64))
        rule = w.op("And", rule, w.op("Equal", column, w.op("Transpose", column, perm=[0, 2, 1])))
    return w.op("Cast", rule, to=int(ir.DataType.FLOAT))


def _gather_rows(w: _Writer, values: ir.Value, index: ir.Value, width: int) -> ir.Value:
    """values (N, A, width) at index (N, K) along A → (N, K, width)."""
    wide = w.op("Expand", w.op("Unsqueeze", index, w.const([2], np.int64)), w.const([1, 1, width], np.int64))
    return w.op("GatherElements", values, wide, axis=1)


def _padded(w: _Writer, scores: ir.Value, boxes: ir.Value, classes: ir.Value, k: int) -> tuple[ir.Value, ...]:
    """scores (N, A), boxes (N, A, 4), classes (N, A) with ``k`` more anchors: score -1, box and class 0."""
    batch = w.op("Slice", w.op("Shape", scores), w.const([0], np.int64), w.const([1], np.int64))
    rows = w.op("Concat", batch, w.const([k], np.int64), axis=0)  # [N, k]
    pad = w.op("Expand", w.const([[-1.0]]), rows)
    pad_boxes = w.op("Expand", w.const(np.zeros((1, 1, 4), np.float32)),
                     w.op("Concat", rows, w.const([4], np.int64), axis=0))
    pad_classes = w.op("Expand", w.const([[0]], np.int64), rows)
    return (w.op("Concat", scores, pad, axis=1), w.op("Concat", boxes, pad_boxes, axis=1),
            w.op("Concat", classes, pad_classes, axis=1))


def _nms_outputs(w: _Writer, boxes: ir.Value, scores: ir.Value, head: Head, nms: NMS) -> list[ir.Value]:
    k, m = nms.candidates, nms.max_detections
    best, best_class = w.ops("TopK", scores, w.const([1], np.int64), n=2, axis=2)  # (N, A, 1)
    squeeze = w.const([2], np.int64)
    best, best_class = w.op("Squeeze", best, squeeze), w.op("Squeeze", best_class, squeeze)
    threshold = w.const(nms.score_threshold)
    masked = w.op("Where", w.op("Greater", best, threshold), best, w.const(-1.0))
    if head.anchors is None or head.anchors < k:  # K candidates always: pad with k boxes that never pass
        masked, boxes, best_class = _padded(w, masked, boxes, best_class, k)
    top, index = w.ops("TopK", masked, w.const([k], np.int64), n=2, axis=1)  # (N, K) sorted
    valid = w.op("Greater", top, threshold)
    cand_boxes = _gather_rows(w, boxes, index, 4)
    cand_classes = w.op("Cast", w.op("GatherElements", best_class, index, axis=1), to=int(ir.DataType.INT32))
    suppress = _suppression(w, cand_boxes, cand_classes, nms, k)
    keep = valid
    for _ in range(NMS_ROUNDS):
        hits = w.op("MatMul", w.op("Unsqueeze", w.op("Cast", keep, to=int(ir.DataType.FLOAT)),
                                   w.const([1], np.int64)), suppress)  # (N, 1, K)
        hits = w.op("Squeeze", hits, w.const([1], np.int64))
        keep = w.op("And", valid, w.op("Not", w.op("Greater", hits, w.const(0.5))))
    rank = w.op("Where", keep, w.const(k - np.arange(k, dtype=np.float32)), w.const(0.0))
    chosen, position = w.ops("TopK", rank, w.const([m], np.int64), n=2, axis=1)  # (N, M) in candidate order
    found = w.op("Greater", chosen, w.const(0.0))
    count = w.op("ReduceSum", w.op("Cast", keep, to=int(ir.DataType.FLOAT)), w.const([1], np.int64), keepdims=1)
    count = w.op("Cast", w.op("Min", count, w.const([float(m)])), to=int(ir.DataType.INT32))
    out_boxes = w.op("Where", w.op("Unsqueeze", found, w.const([2], np.int64)),
                     _gather_rows(w, cand_boxes, position, 4), w.const(0.0))
    out_scores = w.op("Where", found, w.op("GatherElements", top, position, axis=1), w.const(0.0))
    out_classes = w.op("Where", found, w.op("GatherElements", cand_classes, position, axis=1),
                       w.const(0, np.int32))
    return [count, out_boxes, out_scores, out_classes]


def append_nms(model: ir.Model, nms: NMS) -> ir.Model:
    """``model`` (changed in place) with ``nms`` after its raw head; its outputs become ``NMS_OUTPUTS``.

    Refuses, before changing anything, a head whose shapes do not match ``nms.head``.
    """
    graph = model.graph
    if any(d is None or None in d[1:] for d in map(_dims, graph.outputs)):
        infer_output_dims(model)
    head = find_head(graph, nms)
    if model.opset_imports.get("", 0) < 13:
        raise InvalidArgument(f"the model's opset {model.opset_imports.get('', 0)} is below 13, which the NMS nodes "
                              "need (Squeeze/Unsqueeze axes as inputs); export the model at opset 13 or later")
    batch = head.values[0].shape[0]
    w = _Writer()
    boxes, scores = _decode(w, head, nms)
    outputs = _nms_outputs(w, boxes, scores, head, nms)
    m = nms.max_detections
    types = ((ir.DataType.INT32, [batch, 1]), (ir.DataType.FLOAT, [batch, m, 4]), (ir.DataType.FLOAT, [batch, m]),
             (ir.DataType.INT32, [batch, m]))
    for value, name, (dtype, shape) in zip(outputs, NMS_OUTPUTS, types, strict=True):
        value.name, value.dtype, value.shape = name, dtype, ir.Shape(shape)
    for value in w.tape.initializers:
        graph.register_initializer(value)
    graph.extend(w.tape.nodes)
    graph.outputs.clear()
    graph.outputs.extend(outputs)
    return model
