"""The architecture, checked on the source: imports point one way (DESIGN.md's invariant), no
import cycles (function-level imports included), TensorRT only through the shim, short functions."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "trtforge"

#: The pipeline, low to high: a module may import its own layer and the layers below it, never above.
#: Top-level modules (``pipeline``, ``artifact``, ``refit``) are layers of their own.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("_version", "core"),
    ("capture",),
    ("passes",),
    ("cache",),
    ("quantize",),
    ("builder", "convert"),
    ("runtime",),
    ("vision",),
    ("zoo",),
    ("bench",),
    ("serve",),
    ("artifact",),
    ("pipeline", "refit"),
    ("debug", "conformance"),
    ("cli",),
)
RANK: dict[str, int] = {name: rank for rank, names in enumerate(LAYERS) for name in names}

#: Siblings that the order above would allow but the design forbids: (package, never imports, why).
FORBIDDEN: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("runtime", ("builder", "quantize", "passes", "capture", "cache"),
     "runs engines; knows nothing of how they were made"),
    ("builder", ("quantize", "passes", "capture", "cache"), "builds a processed graph it is handed"),
    ("quantize", ("builder",), "knows nothing of TensorRT"),
    ("passes", ("cache",), "pure graph transforms"),
    ("convert", ("capture", "passes", "quantize", "cache"), "the direct path lowers PyTorch to TensorRT, no ONNX"),
    ("serve", ("builder", "quantize", "passes", "capture", "cache"), "serves engines it is handed"),
)


def trtforge_imports(path: Path) -> set[str]:
    """Every ``trtforge.X.Y`` module that ``path`` imports, at module level or inside functions."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] == "trtforge":
                found.add(node.module)
                found.update(f"{node.module}.{alias.name}" for alias in node.names
                             if module_path(f"{node.module}.{alias.name}") is not None)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "trtforge")
    return found


def module_path(module: str) -> Path | None:
    base = PACKAGE.parent.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


@cache
def import_graph() -> dict[str, set[str]]:
    return {module_name(p): {m for m in trtforge_imports(p) if module_path(m) is not None}
            for p in sorted(PACKAGE.rglob("*.py"))}


def test_every_package_and_top_level_module_has_a_layer():
    layers = {layer_of(m) for m in import_graph()} - {None}
    assert layers <= set(RANK), f"give these a place in LAYERS: {sorted(layers - set(RANK))}"


def test_imports_point_down_the_pipeline():
    upward = sorted(
        f"{module} ({layer_of(module)}) imports {target} ({layer_of(target)})"
        for module, targets in import_graph().items() if layer_of(module) in RANK
        for target in targets if layer_of(target) in RANK and RANK[layer_of(target)] > RANK[layer_of(module)]
    )
    assert not upward, "imports must point down the pipeline:\n" + "\n".join(upward)


@pytest.mark.parametrize(("package", "forbidden", "why"), FORBIDDEN, ids=[f[0] for f in FORBIDDEN])
def test_forbidden_siblings(package, forbidden, why):
    offenders = sorted(f"{m} imports {t}" for m, targets in import_graph().items() if layer_of(m) == package
                       for t in targets if layer_of(t) in forbidden)
    assert not offenders, f"trtforge.{package} ({why}):\n" + "\n".join(offenders)


def test_no_import_cycles_including_function_level_imports():
    graph = import_graph()
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if target == node or target == "trtforge" or node.startswith(f"{target}."):
                continue  # a package's own __init__ and a module's parent package are not cycles
            if state.get(target) == 1:
                cycles.append(stack[stack.index(target):] + [target])
            elif target not in state:
                visit(target, stack)
        stack.pop()
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [])
    assert not cycles, "import cycles:\n" + "\n".join(" → ".join(c) for c in cycles)


def test_no_function_over_80_lines():
    long = sorted(
        f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for path in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > 80
    )
    assert not long, "split these functions (at most 80 lines):\n" + "\n".join(long)


def test_the_checks_can_fail(tmp_path):
    """The import walker sees function-level imports, so a cycle hidden inside a function is found."""
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from trtforge.core import specs\n    import trtforge.runtime.load\n")
    assert trtforge_imports(source) >= {"trtforge.core", "trtforge.core.specs", "trtforge.runtime.load"}


def test_tensorrt_is_imported_only_through_the_shim():
    direct = [
        str(path.relative_to(PACKAGE.parent))
        for path in PACKAGE.rglob("*.py")
        if path != PACKAGE / "core" / "trt.py" and {"tensorrt", "tensorrt_rtx"} & {
            (n.module or "").split(".")[0] if isinstance(n, ast.ImportFrom) else a.name.split(".")[0]
            for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, (ast.Import, ast.ImportFrom))
            for a in (n.names if isinstance(n, ast.Import) else [n])
        }
    ]
    assert not direct, f"import TensorRT through trtforge.core.trt, not directly: {direct}"
