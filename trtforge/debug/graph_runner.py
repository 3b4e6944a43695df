"""Run one ONNX graph for ``check`` and ``compare``: ONNX Runtime, or the strict evaluator where ORT has no kernel.

ONNX Runtime's CPU provider has no BF16 kernels for Conv, MatMul and most other compute ops, so a
BF16 graph (what ``trtforge build --precision bf16`` hands TensorRT) runs in the strict evaluator
(``trtforge.passes.evaluate.run_strict``: ``onnx.reference``, each node in its declared type). The
engine says which one runs (``evaluator``), so a report can name it.

Example:
    >>> with open_graph(Path("out/m_bf16.onnx")) as engine:
    ...     engine.evaluator, engine(x=np.zeros((1, 3, 32, 32), np.float32))["y"].shape
    ('strict evaluator (onnx.reference; ONNX Runtime has no BF16 kernels)', (1, 4))
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from trtforge.core.specs import TensorSpec

STRICT = "strict evaluator (onnx.reference; ONNX Runtime has no BF16 kernels)"


class StrictGraphEngine:
    """An ONNX graph run by ``onnx.reference`` behind the part of the ``Engine`` protocol check/compare use."""

    route = "onnxruntime"
    evaluator = STRICT

    def __init__(self, onnx_path: Path, profiles: tuple = ()) -> None:
        from trtforge.passes.graph import input_specs, load_ir

        self.onnx_path = Path(onnx_path)
        self._model = load_ir(self.onnx_path)
        self.inputs = tuple(TensorSpec(n, d.name, tuple(-1 if x is None else x for x in s))
                            for n, d, s in input_specs(self._model))
        self.outputs = tuple(TensorSpec(v.name, "float32", ()) for v in self._model.graph.outputs)
        self.profiles = tuple(profiles)
        self.device = "cpu"

    def __call__(self, **feeds: Any) -> dict[str, np.ndarray]:
        from trtforge.passes.evaluate import run_strict

        values = run_strict(self._model, {k: np.asarray(v) for k, v in feeds.items()})
        return {spec.name: v.astype(np.float32) if v.dtype.name == "bfloat16" else v
                for spec, v in zip(self.outputs, values, strict=True)}

    def __enter__(self) -> StrictGraphEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self._model = None


def needs_strict(onnx_path: Path) -> bool:
    """Whether ``onnx_path`` computes in BF16 (ONNX Runtime's CPU provider has no kernels for it)."""
    from trtforge.debug.layerwise import graph_precision
    from trtforge.passes.graph import load_ir

    return graph_precision(load_ir(onnx_path)) == "bf16"
