"""The direct path: PyTorch → ``torch.export`` → converter registry → TensorRT network, no ONNX.

Example:
    >>> from trtforge.convert import convert_module, coverage
    >>> plan, conversion = convert_module(model, (torch.randn(2, 3, 224, 224),), CompileConfig(batch=(1, 8, 32)))
    >>> print(coverage(model, (torch.randn(2, 3, 224, 224),)).table())
"""

from trtforge.convert.api import Conversion, convert_module, lower_module
from trtforge.convert.converters import all_converters, source_hash
from trtforge.convert.evaluator import evaluate
from trtforge.convert.registry import REGISTRY, converter

__all__ = ["REGISTRY", "all_converters", "Conversion", "convert_module", "converter", "evaluate", "lower_module", "source_hash"]
