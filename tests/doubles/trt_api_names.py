"""The TensorRT names trtforge's code uses, read from the code (AST), and the names each real binding has.

``used_names(path)`` finds, in one source file:

- attribute calls, reads and writes on TensorRT objects, recognised by the receiver's name (the last
  part of ``x``, ``self._x`` or ``state.x``, leading underscores dropped): ``engine``, ``context``,
  ``runtime``, ``builder``, ``cfg``/``config``, ``network``, ``parser``, ``logger``, ... (``RECEIVERS``);
  a function parameter annotated with another type (``config: CompileConfig``) is not one;
- attributes of the bindings module and their members (``trt.TensorIOMode.INPUT``, ``mod.Builder``),
  where ``trt``/``mod``/``self._trt`` name the bindings; the shim's own functions
  (``trtforge.core.trt``: ``trt.bindings()``, ``trt.info()``) are not TensorRT's;
- keyword-argument names of calls on those objects;
- whether a name is feature-tested: it is read through ``getattr(x, "name", default)``, tested with
  ``hasattr(x, "name")``, or used in the body of an ``if`` whose test holds a hasattr/getattr.

``binary_names(wheel)`` reads a bindings wheel's ``tensorrt.so`` (which cannot be imported without
libnvinfer) and answers whether a name is among its strings: pybind11 keeps every method, property,
enum member and argument name as a NUL-terminated literal (the linker may share a tail, so
``set_named_weights`` lives at the end of ``unset_named_weights``). ``module_names(module)`` gives an
importable binding's names (every class's attributes and enum members) and its docstring signatures.
"""

from __future__ import annotations

import ast
import re
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import trtforge.core.trt as shim
from trtforge.core.trt_log import RecordingLogger

#: Receiver names of TensorRT objects (what the code calls its engines, contexts, ...).
RECEIVERS: frozenset[str] = frozenset({
    "engine", "context", "runtime", "builder", "cfg", "config", "runtime_config", "network", "net", "parser",
    "logger", "trt_logger", "refitter", "opt_profile", "prototype", "runtime_cache", "err", "timing_cache",
    "cache", "empty", "merged", "flag",
})
#: Names that hold the bindings module itself.
MODULES: frozenset[str] = frozenset({"trt", "mod", "bindings"})
#: Python's own attributes and our recording logger's (``logger.errors()``), never TensorRT's.
PYTHON: frozenset[str] = frozenset({"__init__", "__name__", "__version__", "name", "value",
                                    *(n for n in dir(RecordingLogger) if not n.startswith("__")),
                                    "messages", "trt_logger"})
#: Parameters that are trtforge objects whatever their name says: ``config`` is a ``CompileConfig``.
TRTFORGE_PARAMS: frozenset[str] = frozenset({"config"})


@dataclass(frozen=True)
class Use:
    """One TensorRT name the code uses: where, and whether a keyword argument."""

    name: str
    where: str
    keyword: str | None = None  # the method a keyword argument belongs to


def _receiver(node: ast.expr) -> str | None:
    """``x``, ``self._x``, ``state.x`` → ``"x"``; None for a sidecar's record (``sidecar.builder``)."""
    if isinstance(node, ast.Name):
        return node.id.lstrip("_")
    if isinstance(node, ast.Attribute):
        return None if _receiver(node.value) == "sidecar" else node.attr.lstrip("_")
    return None


def _tests_a_feature(test: ast.expr) -> bool:
    """An ``if`` test holding ``hasattr(...)`` or ``getattr(...)``: its body is feature-tested."""
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("hasattr", "getattr")
               for n in ast.walk(test))


def _typed_params(fn: ast.AST) -> set[str]:
    """A function's parameters that are not TensorRT objects: annotated with a type, or in ``TRTFORGE_PARAMS``."""
    if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
        return set()
    args = [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]
    return {a.arg for a in args if a.arg in TRTFORGE_PARAMS or (getattr(a, "annotation", None) is not None
            and ast.unparse(a.annotation) not in ("Any", "object"))}


def _scoped(tree: ast.AST) -> Iterable[tuple[ast.AST, set[str], bool]]:
    """Every node with the typed parameters of the functions around it (inner ones shadow outer ones),
    and whether it lies in the body of an ``if`` that tests a feature (``_tests_a_feature``)."""
    stack: list[tuple[ast.AST, set[str], bool]] = [(tree, set(), False)]
    while stack:
        node, typed, guarded = stack.pop()
        yield node, typed, guarded
        inner = typed
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            args = {a.arg for a in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]}
            inner = (typed - args) | _typed_params(node)
        if isinstance(node, ast.If) and _tests_a_feature(node.test):
            stack.extend((child, inner, True) for child in node.body)
            stack.extend((child, inner, guarded) for child in [node.test, *node.orelse])
            continue
        stack.extend((child, inner, guarded) for child in ast.iter_child_nodes(node))


def _module_chain(node: ast.Attribute) -> list[str] | None:
    """``trt.TensorIOMode.INPUT`` → ["TensorIOMode", "INPUT"] when rooted at the bindings; else None."""
    parts: list[str] = []
    current: ast.expr = node
    while isinstance(current, ast.Attribute):
        parts.append(current.attr)
        current = current.value
    root = _receiver(current) if isinstance(current, ast.Name) else None
    if isinstance(current, ast.Attribute) and current.attr == "_trt":
        root = "trt"
    if root not in MODULES:
        return None
    parts.reverse()
    if hasattr(shim, parts[0]):  # the shim's own function (trt.bindings(), trt.info())
        return None
    return parts


def used_names(path: Path) -> tuple[list[Use], set[str]]:
    """(every TensorRT name ``path`` uses, the names it feature-tests) — see the module docstring."""
    uses: list[Use] = []
    tested: set[str] = set()
    for node, skip, guarded in _scoped(ast.parse(path.read_text())):
        where = f"{path.name}:{getattr(node, 'lineno', 0)}"
        if guarded and isinstance(node, ast.Attribute):
            tested.add(node.attr)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("hasattr", "getattr"):
            if len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
                if node.func.id == "hasattr" or len(node.args) == 3:
                    tested.add(node.args[1].value)
                if _receiver(node.args[0]) in (RECEIVERS | MODULES) - skip:
                    uses.append(Use(node.args[1].value, where))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.keywords:
            receiver = _receiver(node.func.value)
            if (receiver in RECEIVERS and receiver not in skip) or _module_chain(node.func) is not None:
                uses.extend(Use(k.arg, where, node.func.attr) for k in node.keywords if k.arg is not None)
        if not isinstance(node, ast.Attribute) or node.attr in PYTHON:
            continue
        chain = _module_chain(node)
        if chain is not None:
            uses.extend(Use(part, where) for part in chain if part not in PYTHON)
            continue
        receiver = _receiver(node.value)
        if receiver in RECEIVERS and receiver not in skip:
            uses.append(Use(node.attr, where))
    return sorted(set(uses), key=lambda u: (u.where, u.name)), tested


def code_names(paths: Iterable[Path]) -> tuple[list[Use], set[str]]:
    """``used_names`` over several files, together."""
    uses: list[Use] = []
    tested: set[str] = set()
    for path in paths:
        more, also = used_names(path)
        uses += more
        tested |= also
    return uses, tested


@dataclass(frozen=True)
class Binding:
    """One flavour's names: ``has(name)``, and the argument names of a method where known."""

    flavour: str
    strings: bytes = b""
    names: frozenset[str] = frozenset()
    signatures: dict | None = None

    def has(self, name: str) -> bool:
        return name in self.names or (name.encode() + b"\0") in self.strings

    def has_keyword(self, method: str, keyword: str) -> bool:
        """The keyword is an argument of ``method`` (docstring signatures), else among the binary's strings."""
        if self.signatures is not None and method in self.signatures:
            return keyword in self.signatures[method]
        return self.has(keyword)


def binary_names(wheel: Path) -> Binding:
    """The strings of the ``tensorrt.so`` inside a bindings wheel, as a ``Binding`` named by the wheel."""
    with zipfile.ZipFile(wheel) as archive:
        data = b"\0".join(archive.read(n) for n in archive.namelist() if n.endswith(".so"))
    if not data:
        raise ValueError(f"{wheel.name} holds no .so")
    package, version = wheel.name.split("-")[:2]
    return Binding(f"{package} {version}", strings=data)


_SIGNATURE = re.compile(r"^(\w+)\((.*?)\)\s*->", re.MULTILINE)


def module_names(module: ModuleType) -> Binding:
    """An importable binding's names (module, classes, their attributes, enum members) and signatures."""
    names: set[str] = set(dir(module))
    signatures: dict[str, set[str]] = {}
    for attr in dir(module):
        value = getattr(module, attr)
        if isinstance(value, type):
            names.update(dir(value))
            names.update(getattr(value, "__members__", {}))
            for member in dir(value):
                doc = getattr(getattr(value, member, None), "__doc__", None) or ""
                for method, args in _SIGNATURE.findall(doc):
                    signatures.setdefault(method, set()).update(
                        a.split(":")[0].strip() for a in args.split(",") if a.strip())
    return Binding(f"{module.__name__} {getattr(module, '__version__', '?')}", names=frozenset(names),
                   signatures=signatures)


def problems(uses: list[Use], tested: set[str], binding: Binding) -> list[str]:
    """What ``binding`` lacks of ``uses``, naming it; names the code feature-tests are allowed to be absent."""
    found = []
    for use in uses:
        if use.keyword is not None:
            if not binding.has_keyword(use.keyword, use.name):
                found.append(f"{binding.flavour}: {use.keyword}() has no argument {use.name!r} ({use.where})")
        elif use.name not in tested and not binding.has(use.name):
            found.append(f"{binding.flavour}: no {use.name!r} ({use.where}), used without a hasattr test")
    return found
