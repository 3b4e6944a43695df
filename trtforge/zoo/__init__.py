"""Offline real models for demos, tests and benchmarks.

Example:
    >>> from trtforge.zoo import efficientnet_lite0
    >>> model = efficientnet_lite0()
"""

from trtforge.zoo.efficientnet_lite import EfficientNetLite0, efficientnet_lite0
from trtforge.zoo.minilm import minilm_encoder, minilm_l6

__all__ = ["EfficientNetLite0", "efficientnet_lite0", "minilm_encoder", "minilm_l6"]
