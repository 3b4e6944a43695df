"""Detection post-processing appended to a model's graph: fixed-shape NMS (``trtforge.NMS``).

The settings are checked once, here, before any graph or build work; ``trtforge.passes.nms`` writes the
graph. Semantics are those of ultralytics' ``non_max_suppression`` defaults: each box takes its best class,
boxes at or below ``score_threshold`` are dropped, the ``candidates`` highest-scoring boxes go to greedy
class-aware NMS (torchvision's ``batched_nms`` rule: a box is suppressed by a kept box of the same class
with IoU > ``iou_threshold``), and the first ``max_detections`` survivors are kept by descending score.

Example:
    >>> NMS("yolo", score_threshold=0.25, iou_threshold=0.45, max_detections=100).output_names
    ('num_detections', 'detection_boxes', 'detection_scores', 'detection_classes')
    >>> NMS("yolo", iou_threshold=1.5)
    Traceback (most recent call last):
    trtforge.core.errors.ConfigError: NMS(iou_threshold=1.5): give a number in (0, 1), e.g. 0.45
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from trtforge.core.errors import ConfigError, WrongType, spelled
from trtforge.core.options import GRAPH, CliFlag, option

#: Head layouts the NMS reads: YOLOv8/11 and ultralytics' YOLOv5u ``(N, 4+C, A)`` (cx, cy, w, h, class
#: scores); the original YOLOv5 ``(N, A, 5+C)`` (cx, cy, w, h, objectness, class scores); a generic pair of
#: outputs ``boxes (N, A, 4)`` (x1, y1, x2, y2) and ``scores (N, A, C)``.
HEADS: tuple[str, ...] = ("yolo", "yolov5", "boxes-scores")
#: The outputs, in the EfficientNMS convention: (N, 1) int32, (N, K, 4) float32, (N, K) float32, (N, K) int32.
NMS_OUTPUTS: tuple[str, ...] = ("num_detections", "detection_boxes", "detection_scores", "detection_classes")
#: TensorRT's TopK takes at most this K (every flavour: "K exceeds the maximum value allowed (3840)").
MAX_CANDIDATES = 3840
#: Every node the NMS appends is named with this prefix (the float pass keeps them in FP32 by rule).
NMS_PREFIX = "trtforge_nms/"
#: Cluster-NMS suppression rounds, unrolled in the ONNX graph (``passes.nms``) and in the PyTorch routes'
#: module (``runtime.torch_nms``): greedy NMS's result exactly when no suppression chain among the candidates
#: has more links (tests/detect/test_nms.py shows 16 links exact and 17 not).
NMS_ROUNDS = 16


def _flag(name: str, value: Any) -> str:
    """How the reader wrote NMS option ``name``: ``--iou-threshold 1.5`` in the CLI, ``NMS(iou_threshold=1.5)`` in Python."""
    cli = {"head": "--nms", "candidates": "--nms-candidates"}.get(name, "--" + name.replace("_", "-"))
    return spelled(cli=f"{cli} {value}", python=f"NMS({value!r})" if name == "head" else f"NMS({name}={value!r})")


@dataclass(frozen=True)
class NMS:
    """Fixed-shape NMS appended to a detector's raw head (``postprocess=trtforge.NMS("yolo")``,
    ``trtforge build --nms yolo``); outputs ``NMS_OUTPUTS``, padded to ``max_detections``.

    Example:
        >>> NMS("boxes-scores", score_threshold=0.3, max_detections=50, candidates=200, class_agnostic=True)
    """

    head: str = option(help=f"append fixed-shape NMS to the raw head: {' | '.join(HEADS)}", affects=GRAPH,
                       cli=CliFlag(str | None, None, ("--nms",), "nms", help=(
                           f"append fixed-shape NMS after the model's raw head, laid out as {' | '.join(HEADS)}; "
                           "outputs num_detections, detection_boxes/scores/classes")))
    score_threshold: float = option(0.25, help="--nms: boxes scoring at or below this are dropped", affects=GRAPH,
                                    cli=CliFlag(float))
    iou_threshold: float = option(0.45, help="--nms: a box is suppressed by a kept box of its class with IoU above this",
                                  affects=GRAPH, cli=CliFlag(float))
    max_detections: int = option(100, help="--nms: detections kept per image (K), by descending score", affects=GRAPH,
                                 cli=CliFlag(int))
    candidates: int = option(1000, help="--nms: the highest-scoring boxes that go to NMS", affects=GRAPH,
                             cli=CliFlag(int, name="nms_candidates"))
    class_agnostic: bool = option(False, help="--nms: suppress across classes", affects=GRAPH,
                                  cli=CliFlag(bool, name="nms_class_agnostic"))

    def __post_init__(self) -> None:
        if self.head not in HEADS:
            raise ConfigError(f"{_flag('head', self.head)}: unknown head layout; choose one of {', '.join(HEADS)}")
        for name, example in (("score_threshold", 0.25), ("iou_threshold", 0.45)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < value < 1.0:
                raise ConfigError(f"{_flag(name, value)}: give a number in (0, 1), e.g. {example}")
        for name in ("max_detections", "candidates"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{_flag(name, value)}: give a positive whole number")
        if self.candidates > MAX_CANDIDATES:
            raise ConfigError(f"{_flag('candidates', self.candidates)}: TensorRT's TopK takes at most {MAX_CANDIDATES} "
                              f"candidates; give {MAX_CANDIDATES} or fewer (1000 is usual)")
        if self.max_detections > self.candidates:
            raise ConfigError(f"{_flag('max_detections', self.max_detections)} is above the {self.candidates} "
                              "candidates, and only candidates can survive NMS; lower it or raise "
                              + spelled(cli="--nms-candidates", python="candidates="))
        object.__setattr__(self, "score_threshold", float(self.score_threshold))
        object.__setattr__(self, "iou_threshold", float(self.iou_threshold))
        object.__setattr__(self, "class_agnostic", bool(self.class_agnostic))

    @property
    def output_names(self) -> tuple[str, ...]:
        return NMS_OUTPUTS

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def of(cls, value: Any) -> NMS | None:
        """None, an ``NMS``, or a dict of its fields (a sidecar's record) → an ``NMS`` (or None)."""
        if value is None or isinstance(value, NMS):
            return value
        if isinstance(value, dict):
            return cls(**value)
        raise WrongType(f"postprocess= takes trtforge.NMS(head, ...), not {type(value).__name__}; "
                        "e.g. postprocess=trtforge.NMS('yolo')")
