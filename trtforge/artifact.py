"""What ``trtforge.compile`` returns: the engine, its sidecar and the ONNX graphs beside it.

Example:
    >>> art = trtforge.compile(model, (x,), precision="fp16")
    >>> art.engine_path.name, art.sidecar.precision.built
    ('efficientnet_lite0_fp16.engine', 'fp16')
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path

from trtforge.core.sidecar import Sidecar, read_sidecar


@dataclass(frozen=True)
class Artifact:
    """An engine file plus the sidecar that describes it (and the graphs it came from)."""

    engine_path: Path
    sidecar_path: Path
    #: The processed and the FP32 reference graph; None on the direct path (no ONNX is made).
    onnx_path: Path | None
    reference_onnx_path: Path | None
    sidecar: Sidecar

    @classmethod
    def open(cls, path: Path) -> Artifact:
        """An artifact from its sidecar or engine path; checks the engine's sha256."""
        sidecar = read_sidecar(Path(path))
        sidecar.verify_engine()
        base = sidecar.path.parent
        return cls(
            engine_path=sidecar.engine_path,
            sidecar_path=sidecar.path,
            onnx_path=base / sidecar.source.onnx_file if sidecar.source.onnx_file else None,
            reference_onnx_path=base / sidecar.source.reference_onnx_file if sidecar.source.reference_onnx_file
            else None,
            sidecar=sidecar,
        )

    @property
    def precision(self) -> str:
        return self.sidecar.precision.built or "?"

    def engine(self, route: str = "tensorrt", device=None, **options):
        """This artifact behind the ``Engine`` protocol: ``trtforge.load(engine_path, route, device)``."""
        from trtforge.runtime.load import load

        return load(self.sidecar_path, route=route, device=device, **options)

    def predictor(self, route: str = "tensorrt", device=None, *, task: str = "classification", **options):
        """An image predictor over this artifact (preprocessing from the sidecar), e.g.
        ``art.predictor(route="cuda_graph")("cat.jpg").class_id``.

        ``options`` that ``Predictor`` takes (``top_k``, ``compile_preprocessing``, ...) go to it; the
        rest go to the route (``trtforge.load``).
        """
        from trtforge.vision.predictor import Predictor

        names = predictor_option_names(Predictor)
        predictor_options = {k: v for k, v in options.items() if k in names}
        route_options = {k: v for k, v in options.items() if k not in names}
        engine = self.engine(route, device, **route_options)
        return Predictor(engine, self.sidecar.preprocessing, task=task, **predictor_options)

    def __str__(self) -> str:
        return f"Artifact({self.engine_path}, precision={self.precision}, {self.sidecar.engine_size} bytes)"


def predictor_option_names(predictor: type) -> frozenset[str]:
    """The keyword-only options of ``predictor.__init__`` (read from its signature, never listed by hand)."""
    parameters = inspect.signature(predictor.__init__).parameters.values()
    return frozenset(p.name for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY)
