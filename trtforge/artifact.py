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

    def predictor(self, route: str = "tensorrt", device=None, *, task: str | None = None, **options):
        """An image predictor over this artifact (preprocessing from the sidecar), e.g.
        ``art.predictor(route="cuda_graph")("cat.jpg").class_id``. ``task`` defaults to ``"detection"`` for an
        artifact built with NMS (``postprocess=``/``--nms``), else ``"classification"``.

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


@dataclass(frozen=True)
class PartitionedArtifact:
    """What ``compile(model, inputs, path="direct", min_block_size=...)`` returns: the partitioned module's
    folder (``trtforge.convert.saved``: manifest, exported program, an engine + sidecar per engine part).

    Example:
        >>> art = trtforge.compile(model, (x,), path="direct", precision="fp32", min_block_size=2)
        >>> module = art.load()                 # engine parts on TensorRT where it runs, else the evaluator
        >>> module.trtforge_route, art.engines, list(art.pytorch)
        ('evaluator', ('fused_0', 'fused_2'), ['fused_1'])
    """

    folder: Path
    #: The engine parts (fused submodule names) and the parts that stayed in PyTorch (name → why).
    engines: tuple[str, ...]
    pytorch: dict[str, str]
    #: The engine parts this compile served from the engine cache (no build ran for them); the rest were built.
    cache_hits: tuple[str, ...] = ()

    @property
    def built(self) -> tuple[str, ...]:
        """The engine parts this compile built (not served from the engine cache)."""
        return tuple(name for name in self.engines if name not in self.cache_hits)

    @property
    def manifest_path(self) -> Path:
        from trtforge.convert.saved import MANIFEST

        return self.folder / MANIFEST

    def load(self, route: str | None = None, device=None, **options):
        """The module (``load_partitioned_module``)."""
        return load_partitioned_module(self.folder, route=route, device=device, **options)

    def __str__(self) -> str:
        return f"PartitionedArtifact({self.folder}, {len(self.engines)} engine part(s), {len(self.pytorch)} in PyTorch)"


def load_partitioned_module(folder: str | Path, route: str | None = None, device=None, **options):
    """A saved partitioned module whose engine parts run on ``route``: ``"tensorrt"`` (``TensorRTEngine``;
    ``device`` and ``options`` such as ``bindings=`` go to it) or ``"evaluator"`` (the reference evaluator
    on the CPU); None picks ``tensorrt`` where a GPU and TensorRT are here, else ``evaluator``. The module
    says which: ``module.trtforge_route``.
    """
    from trtforge.convert.partition import EngineModule, reference_runner
    from trtforge.convert.saved import load_partitioned
    from trtforge.core.errors import InvalidArgument
    from trtforge.core.routes import EVALUATOR_ROUTE, PARTITION_ROUTES
    from trtforge.runtime.partitioned import TensorRTRunner, tensorrt_can_run

    if route is None:
        route = PARTITION_ROUTES[0] if tensorrt_can_run() or "bindings" in options else EVALUATOR_ROUTE
    if route not in PARTITION_ROUTES:
        raise InvalidArgument(f"route={route!r}: a partitioned module's engine parts run on "
                              f"{' or '.join(map(repr, PARTITION_ROUTES))}")
    if route == EVALUATOR_ROUTE and (device is not None or options):
        raise InvalidArgument(f"route={route!r} runs on the CPU and takes no device= or options "
                              f"({', '.join(options) or 'device'}); drop them, or use route='tensorrt'")
    runner = TensorRTRunner(device, **options) if route != EVALUATOR_ROUTE else reference_runner
    module, _report = load_partitioned(folder, runner)
    if isinstance(runner, TensorRTRunner):  # every engine opened now: a load error is raised here, not mid-call
        for name, part in module.named_modules():
            if isinstance(part, EngineModule):
                runner.open(part, name)
    module.trtforge_route = route
    return module
