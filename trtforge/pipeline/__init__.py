"""``trtforge.compile``: capture → passes → (quantize) → build → artifact, validated up front.

One module per stage:

- ``paths``: output-path policy (names, folders, what is never overwritten);
- ``validate``: every cheap check before expensive work;
- ``onnx_path``: capture → passes → (quantize) → build; ``flavour``: the FP16/BF16 flavour probes;
- ``direct_path``: PyTorch → TensorRT network → build; ``direct_int8``: its INT8 calibration glue;
- ``record``: the record of one build; ``store``: engine-cache storage; ``write``: the artifact on disk;
- ``verb``: ``compile``, the one public verb; ``matrix``: ``build_matrix``.

Example:
    >>> import torch, trtforge
    >>> from trtforge.zoo import efficientnet_lite0
    >>> model = efficientnet_lite0()
    >>> art = trtforge.compile(model, (torch.zeros(1, 3, 224, 224),), precision="fp16", batch=(1, 8, 32))
    >>> art.engine_path
    PosixPath('trtforge_out/efficientnet_lite0_fp16.engine')
"""

from __future__ import annotations

from trtforge.core.errors import AccuracyBudgetMissed
from trtforge.pipeline.matrix import build_matrix
from trtforge.pipeline.paths import OutputPaths, default_name
from trtforge.pipeline.verb import check_budget, compile  # noqa: A004 - the public verb

__all__ = ["AccuracyBudgetMissed", "OutputPaths", "build_matrix", "check_budget", "compile", "default_name"]
