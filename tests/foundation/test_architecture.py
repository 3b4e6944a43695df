"""Imports point one way, down the pipeline (DESIGN.md's invariant), checked on the source."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "trtforge"

#: (package, packages it must never import, why)
FORBIDDEN: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("core", ("capture", "passes", "quantize", "builder", "cache", "runtime", "vision", "bench", "zoo", "cli",
              "pipeline", "artifact", "refit"), "shared by every stage"),
    ("capture", ("passes", "quantize", "builder", "runtime", "vision", "bench"), "first stage"),
    ("passes", ("quantize", "builder", "runtime", "vision", "bench"), "general graph passes"),
    ("quantize", ("builder", "runtime", "vision", "bench"), "knows nothing of TensorRT"),
    ("builder", ("quantize", "runtime", "vision", "bench"), "knows nothing of how engines run"),
    ("runtime", ("quantize", "vision", "bench", "builder", "passes", "capture", "cache"),
     "knows nothing of how the engine was made"),
    ("vision", ("builder", "quantize", "passes", "bench"), "knows nothing of engines' making"),
)


def imported_packages(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "trtforge" and len(parts) > 1:
                found.add(parts[1])
    return found


@pytest.mark.parametrize(("package", "forbidden", "why"), FORBIDDEN, ids=[f[0] for f in FORBIDDEN])
def test_imports_point_down_the_pipeline(package, forbidden, why):
    offenders = {
        str(path.relative_to(PACKAGE.parent)): sorted(imported_packages(path) & set(forbidden))
        for path in sorted((PACKAGE / package).rglob("*.py"))
    }
    offenders = {k: v for k, v in offenders.items() if v}
    assert not offenders, f"trtforge.{package} ({why}) imports {offenders}"


def test_tensorrt_is_imported_only_through_the_shim():
    direct = [
        str(path.relative_to(PACKAGE.parent))
        for path in PACKAGE.rglob("*.py")
        if path.name != "trt.py" and {"tensorrt", "tensorrt_rtx"} & {
            (n.module or "").split(".")[0] if isinstance(n, ast.ImportFrom) else a.name.split(".")[0]
            for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, (ast.Import, ast.ImportFrom))
            for a in (n.names if isinstance(n, ast.Import) else [n])
        }
    ]
    assert not direct, f"import TensorRT through trtforge.core.trt, not directly: {direct}"
