"""General cleanup before precision work: constant folding, BatchNorm folding, no-op removal.

Example:
    >>> model = cleanup(load_ir(Path("m.onnx")))
"""

from __future__ import annotations

import onnx_ir as ir
import onnx_ir.passes.common as common
import onnxscript.optimizer
import onnxscript.rewriter
from onnxscript.rewriter.rules import common as rules

#: Rewrites that make the graph smaller without changing its numbers (beyond float rounding).
CLEANUP_RULES = (
    rules.fuse_batchnorm_into_conv_rule,
    rules.fuse_batchnorm_into_conv_transpose_rule,
    rules.fuse_batchnorm_into_gemm_rule,
    rules.no_op_cast_rule,
    rules.no_op_expand_rule,
    rules.no_op_transpose_rule,
    rules.dropout_inference_rule,
)


def cleanup(model: ir.Model) -> ir.Model:
    """Fold constants and BatchNorms, drop no-ops and identities; returns the same model object."""
    onnxscript.optimizer.optimize_ir(model)
    onnxscript.rewriter.rewrite(model, pattern_rewrite_rules=list(CLEANUP_RULES))
    common.IdentityEliminationPass()(model)
    common.RemoveUnusedNodesPass()(model)
    common.TopologicalSortPass()(model)
    return model
