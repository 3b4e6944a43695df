"""The FP16/BF16 flavour-probing policy: nodes the installed TensorRT cannot build in the low type stay FP32."""

from __future__ import annotations

from collections.abc import Mapping

import onnx_ir as ir

from trtforge.cache.engine_cache import EngineCache
from trtforge.core.config import CompileConfig


def flavour_keep(reference: ir.Model, config: CompileConfig, keep: Mapping[str, str]) -> dict[str, str]:
    """FP16/BF16: the nodes the installed TensorRT cannot build in that type, found by single-node probe builds.

    Answers are cached per flavour, version and dtype under the engine cache folder (in memory with
    ``cache=False``). Each refused node stays FP32 with TensorRT's reason.
    """
    from trtforge.builder.op_probe import refusal
    from trtforge.cache.op_support import UNKNOWN, OpSupport
    from trtforge.core import trt
    from trtforge.passes.float16 import infer_types, plan_float
    from trtforge.passes.graph import copy_model
    from trtforge.passes.op_probe import probe_graphs

    dtype, precision = config.float_dtype, config.precision
    typed = infer_types(copy_model(reference))
    skip = set(plan_float(typed, dtype, keep).fp32_nodes)
    info = trt.info()
    table = OpSupport(EngineCache(config.cache_dir).directory if config.cache else None, info.flavour, info.version,
                      dtype)
    probes = probe_graphs(typed, dtype, skip)
    table.put({sig: refusal(proto.SerializeToString(), precision) for sig, (_, proto) in probes.items()
               if table.get(sig) is UNKNOWN})
    kept = {}
    for signature, (names, _) in probes.items():
        reason = table.get(signature)
        if isinstance(reason, str):
            op = signature.split("|", 1)[0]
            kept.update({name: f"{op}: {info.flavour} {info.version} cannot run it in {precision.upper()} ({reason})"
                         for name in names})
    return kept
