"""A PyTorch model named on the command line: a factory ``package.module:function`` and example input shapes.

``trtforge build --path direct`` and ``trtforge coverage`` take Python models this way (a factory is
code the user names, so it is trusted; the current folder is importable, as in ``python -m``).

Example:
    $ trtforge coverage mypkg.models:make_net --input-shape 2x3x224x224 --input-shape int64:2x64
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from trtforge.core.errors import InvalidArgument

#: ``--input-shape`` dtypes (the prefix before ``:``); float32 when none is given.
INPUT_DTYPES: tuple[str, ...] = ("float32", "float16", "bfloat16", "int64", "int32", "bool")
SHAPE_HELP = "example input shape per forward argument, e.g. 2x3x224x224, or int64:2x64 (repeatable)"


def parse_input_shape(text: str) -> tuple[str, tuple[int, ...]]:
    """``"int64:2x64"`` → ``("int64", (2, 64))``; ``"2x3x8x8"`` → ``("float32", (2, 3, 8, 8))``.

    Example:
        >>> parse_input_shape("int64:2x64")
        ('int64', (2, 64))
    """
    dtype, _sep, dims = text.rpartition(":")
    dtype = dtype or "float32"
    if dtype not in INPUT_DTYPES:
        raise InvalidArgument(f"--input-shape {text}: unknown dtype {dtype!r}; use one of {', '.join(INPUT_DTYPES)}")
    try:
        shape = tuple(int(d) for d in dims.lower().split("x"))
    except ValueError:
        shape = ()
    if not shape or any(d < 1 for d in shape):
        raise InvalidArgument(f"--input-shape {text}: write positive sizes joined by x, e.g. 2x3x224x224")
    return dtype, shape


def model_from_cli(factory: str, input_shapes: list[str] | None) -> tuple[Any, tuple]:
    """The module that ``factory`` makes and zero example inputs of ``input_shapes``; one clear line
    for an ``.onnx`` file, a malformed factory or missing shapes."""
    if factory.endswith(".onnx") or Path(factory).is_file():
        raise InvalidArgument(f"{factory}: --path direct and coverage convert a PyTorch model, not a file; name "
                              "its factory as package.module:function (with --input-shape), or build an .onnx "
                              "without --path direct")
    if ":" not in factory:
        raise InvalidArgument(f"{factory!r} is not a factory; name it as package.module:function")
    if not input_shapes:
        raise InvalidArgument("a PyTorch model needs example input shapes: add --input-shape 2x3x224x224 "
                              "(one per forward argument)")
    shapes = [parse_input_shape(s) for s in input_shapes]
    import torch

    model = module_from_factory(factory)
    if getattr(model, "trtforge_factory", None) is None:
        model.trtforge_factory = factory  # the sidecar names it, so routes can rebuild the model
    return model, tuple(torch.zeros(shape, dtype=getattr(torch, dtype)) for dtype, shape in shapes)


def module_from_factory(factory: str) -> Any:
    """``factory()`` (``package.module:function``, named by the user, so trusted), the current folder importable;
    one clear line when it does not import.

    Example:
        >>> module_from_factory("mypkg.models:make_net").training
        False
    """
    from trtforge.runtime.load import model_from_factory

    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # as `python -m` does: factories in the current folder import
    try:
        return model_from_factory(factory, trust_factory=True)
    except (ImportError, AttributeError) as exc:
        raise InvalidArgument(f"cannot import factory {factory!r} ({exc}); check the module path and "
                              "function name") from exc
