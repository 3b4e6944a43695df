"""Converter families, one module each; importing this package fills the registry."""

from trtforge.convert.ops import (  # noqa: F401  (each module registers its converters on import)
    attention,
    conv,
    detection,
    elementwise,
    matmul,
    norm,
    reduce,
    resize,
    shape,
)
