"""The walk of ``trtforge.compile``'s first parameter through the code, read statically (issue 36's climb count).

Starting at ``compile(model_or_onnx, ...)``, follow every call that receives the parameter or a value derived from
it, into the function that receives it (the parameter it lands in becomes the walked value there). A value is
derived when its expression names a walked value; a call's result is derived (``derive=``) never (``names``:
attribute, subscript, tuple, arithmetic only), when the function it resolves to returns a value derived from what
it received and an unresolved call has the value as its receiver (``methods``) or among its arguments
(``returns``), or whenever a walked value appears in the call (``calls``). Calls resolve through module imports (function-level ones too and
re-exports), ``self.method``, a class's ``__init__``; a method called on the walked value itself (``model.eval()``)
or on an object of unknown type is not followed.

Each followed call is one step of the walk: ``Step(caller, callee, line, returns)`` where ``returns`` says whether
the callee returns a walked value (the value comes back up to its caller). ``floors`` counts the steps by one of
the definitions of a "climb back up a floor" that this module states (``DEFINITIONS``).

Example:
    >>> steps = walk(Path("."))
    >>> counts(steps, "return-of-value")
    {'all': ..., 'quantize': ...}

Run ``python -m tests.support.compile_walk ROOT`` for every definition's counts on the tree at ROOT.

Issue 36 says the walk makes 95 climbs back up a floor, 57 inside ``quantize/``, at d5d9248 (the last commit before
session 15's issue-36 work). No definition here reproduces that (session 16): at d5d9248 the steps number 53
(``names``), 54 (``methods``), 902 (``returns``), 919 (``calls``); of the definitions below the nearest are
``returns``/``other-module-and-back`` (453 steps; 117 into quantize/) and ``names``/``step`` (53; 9). A climb up a
layer of ``LAYERS`` is 0 under every derivation (imports point down; nothing calls back up). So
tests/test_architecture.py keeps its own count (imports that climb quantize's floors: core, methods, drivers).
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

#: Where the walk starts: ``trtforge.compile`` (module, function).
ENTRY = ("trtforge.pipeline.verb", "compile")


@dataclass(frozen=True)
class Function:
    module: str
    qualname: str  # "f" or "Class.f"
    node: ast.FunctionDef | ast.AsyncFunctionDef
    cls: str | None

    @property
    def key(self) -> str:
        return f"{self.module}:{self.qualname}"


@dataclass(frozen=True)
class Step:
    caller: str
    callee: str
    line: int
    returns: bool


class Tree:
    """Every module of ``ROOT/trtforge``: its functions, classes and imports."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.paths = {self._name(p): p for p in sorted((root / "trtforge").rglob("*.py"))}
        self._trees: dict[str, ast.Module] = {}
        self._functions: dict[str, dict[str, Function]] = {}
        self._imports: dict[str, dict[str, str]] = {}

    def _name(self, path: Path) -> str:
        parts = list(path.relative_to(self.root).with_suffix("").parts)
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    def tree(self, module: str) -> ast.Module:
        if module not in self._trees:
            self._trees[module] = ast.parse(self.paths[module].read_text())
        return self._trees[module]

    def functions(self, module: str) -> dict[str, Function]:
        if module not in self._functions:
            self._functions[module] = self._read_functions(module)
        return self._functions[module]

    def _read_functions(self, module: str) -> dict[str, Function]:
        found = {}
        for node in self.tree(module).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found[node.name] = Function(module, node.name, node, None)
            elif isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        found[f"{node.name}.{item.name}"] = Function(module, f"{node.name}.{item.name}", item,
                                                                     node.name)
                found.setdefault(node.name, None)  # a class: its __init__ is looked up on a call
        return found

    def imports(self, module: str) -> dict[str, str]:
        """Module-level names → ``module`` or ``module:name`` they import."""
        if module not in self._imports:
            self._imports[module] = imports_of(self.tree(module).body, module, self)
        return self._imports[module]

    def resolve(self, module: str, name: str, local: dict[str, str] | None = None, depth: int = 0) -> str | None:
        """``name`` as seen in ``module`` → ``module:qualname`` of a function or class, or a module name."""
        if depth > 8:
            return None
        scope = {**self.imports(module), **(local or {})}
        functions = self.functions(module)
        if name in functions and name not in (local or {}):
            return f"{module}:{name}"
        target = scope.get(name)
        if target is None:
            return None
        if ":" not in target:
            return target  # a module
        mod, attr = target.split(":")
        if mod not in self.paths:
            return None
        if attr in self.functions(mod):
            return f"{mod}:{attr}"
        if f"{mod}.{attr}" in self.paths:
            return f"{mod}.{attr}"
        return self.resolve(mod, attr, depth=depth + 1)  # a re-export


def imports_of(body: list[ast.stmt], module: str, tree: Tree) -> dict[str, str]:
    found: dict[str, str] = {}
    nodes = [n for stmt in body for n in ([stmt] if isinstance(stmt, (ast.Import, ast.ImportFrom)) else
                                          (ast.walk(stmt) if isinstance(stmt, (ast.If, ast.Try)) else []))]
    for node in nodes:
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = module.split(".") if tree.paths.get(module, Path()).name == "__init__.py" else \
                    module.split(".")[:-1]
                pkg = pkg[:len(pkg) - node.level + 1]
                base = ".".join(pkg + ([node.module] if node.module else []))
            for alias in node.names:
                found[alias.asname or alias.name] = f"{base}:{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                found[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else \
                    alias.name.split(".")[0]
    return found


#: ``derive="methods"``: an unresolved call's result is derived only when the walked value is its receiver.
RECEIVER_ONLY: list = [False]
#: ``derive="returns"``: decides whether a call's result is derived (set by ``walk``; None: by ``calls``).
CALL_DERIVED: list = [None]


def _names(node: ast.AST, calls: bool, walked: set[str] | None = None) -> Iterator[str]:
    """The names an expression reads (not inside a call's result unless ``calls``; not inside lambdas)."""
    if isinstance(node, ast.Name):
        yield node.id
    elif isinstance(node, ast.Lambda):
        return
    elif isinstance(node, ast.Call) and CALL_DERIVED[0] is not None and calls:
        yield from CALL_DERIVED[0](node, walked or set())
    elif isinstance(node, ast.Call) and not calls:
        # the call's result is not the value; a method of the value (value.attr(...)) is not either
        return
    else:
        for child in ast.iter_child_nodes(node):
            yield from _names(child, calls, walked)


def _targets(node: ast.AST) -> Iterator[str]:
    if isinstance(node, ast.Name):
        yield node.id
    elif isinstance(node, (ast.Tuple, ast.List)):
        for element in node.elts:
            yield from _targets(element)
    elif isinstance(node, ast.Starred):
        yield from _targets(node.value)


def walked_names(function: ast.AST, start: set[str], calls: bool) -> set[str]:
    """The names bound to the walked value or a value derived from it inside ``function`` (to a fixpoint)."""
    walked = set(start)
    changed = True
    while changed:
        changed = False
        for node in ast.walk(function):
            pairs: list[tuple[ast.AST, ast.AST]] = []
            if isinstance(node, ast.Assign):
                pairs = [(t, node.value) for t in node.targets]
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.NamedExpr)) and node.value is not None:
                pairs = [(node.target, node.value)]
            elif isinstance(node, (ast.For, ast.comprehension)):
                pairs = [(node.target, node.iter)]
            elif isinstance(node, ast.withitem) and node.optional_vars is not None:
                pairs = [(node.optional_vars, node.context_expr)]
            for target, value in pairs:
                if walked & set(_names(value, calls, walked)):
                    new = set(_targets(target)) - walked
                    if new:
                        walked |= new
                        changed = True
    return walked


def _params(node: ast.FunctionDef | ast.AsyncFunctionDef, method: bool) -> tuple[list[str], str | None, str | None]:
    args = [a.arg for a in (*node.args.posonlyargs, *node.args.args)]
    if method and args and args[0] in ("self", "cls"):
        args = args[1:]
    return args, (node.args.vararg.arg if node.args.vararg else None), \
        (node.args.kwarg.arg if node.args.kwarg else None)


def _landing(callee: Function, call: ast.Call, walked: set[str], calls: bool) -> set[str]:
    """The callee's parameters that receive a walked value at ``call``."""
    is_method = callee.cls is not None and not any(
        isinstance(d, ast.Name) and d.id == "staticmethod" for d in callee.node.decorator_list)
    params, vararg, kwarg = _params(callee.node, is_method)
    kwonly = [a.arg for a in callee.node.args.kwonlyargs]
    landed = set()
    for i, arg in enumerate(call.args):
        if walked & set(_names(arg, calls, walked)):
            if isinstance(arg, ast.Starred) or i >= len(params):
                if vararg:
                    landed.add(vararg)
                if isinstance(arg, ast.Starred):
                    landed.update(params[i:])
            else:
                landed.add(params[i])
    for keyword in call.keywords:
        if walked & set(_names(keyword.value, calls, walked)):
            if keyword.arg in (*params, *kwonly):
                landed.add(keyword.arg)
            elif kwarg:
                landed.add(kwarg)
            if keyword.arg is None:
                landed.update(kwonly)
    return landed


def _callee(tree: Tree, fn: Function, call: ast.Call, local: dict[str, str]) -> Function | None:
    func = call.func
    target = None
    if isinstance(func, ast.Name):
        target = tree.resolve(fn.module, func.id, local)
    elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        if func.value.id in ("self", "cls") and fn.cls is not None:
            target = f"{fn.module}:{fn.cls}.{func.attr}"
        else:
            base = tree.resolve(fn.module, func.value.id, local)
            if base is not None and ":" not in base and base in tree.paths:
                target = tree.resolve(base, func.attr)
            elif base is not None and ":" in base:  # Class.method / Class.classmethod
                target = f"{base}.{func.attr}"
    if target is None or ":" not in target:
        return None
    module, name = target.split(":")
    functions = tree.functions(module) if module in tree.paths else {}
    found = functions.get(name)
    if found is None and name in functions:  # a class: its __init__
        found = functions.get(f"{name}.__init__")
    return found


def _returns_walked(node: ast.AST, walked: set[str], calls: bool) -> bool:
    return any(isinstance(n, ast.Return) and n.value is not None and walked & set(_names(n.value, True, walked))
               for n in ast.walk(node))


def _returns_rule(tree: Tree) -> Callable[[ast.Call, set[str]], Iterator[str]]:
    """``derive="returns"``: a call's result is derived when the function it resolves to returns a value derived
    from the parameters the walked value lands in; an unresolved call (a library's, a method of an object) when
    a walked value is among its arguments or its receiver. Yields the walked names that make it derived."""
    memo: dict[tuple[str, frozenset[str]], bool] = {}
    owner: dict[int, tuple[Function, dict[str, str]]] = {}
    for module in tree.paths:
        for fn in tree.functions(module).values():
            if fn is not None:
                local = imports_of(list(ast.walk(fn.node)), fn.module, tree)
                for node in ast.walk(fn.node):
                    if isinstance(node, ast.Call):
                        owner.setdefault(id(node), (fn, local))

    def reads(call: ast.Call, walked: set[str]) -> Iterator[str]:
        names = [n for child in ast.iter_child_nodes(call) for n in _names(child, True, walked)]
        fn, local = owner.get(id(call), (None, {}))
        callee = _callee(tree, fn, call, local) if fn is not None else None
        if callee is None:
            receiver = call.func.value if isinstance(call.func, ast.Attribute) else None
            if not RECEIVER_ONLY[0] or (receiver is not None and walked & set(_names(receiver, True, walked))):
                yield from names
            return
        landed = frozenset(_landing(callee, call, walked, True))
        if not landed:
            return
        key = (callee.key, landed)
        if key not in memo:
            memo[key] = False  # in progress: a recursion returns nothing more
            inner = walked_names(callee.node, set(landed), True)
            memo[key] = _returns_walked(callee.node, inner, True)
        if memo[key]:
            yield from names

    return reads


def walk(root: Path, derive: str = "names") -> list[Step]:
    """Every step of the walk of ``compile``'s first parameter, each (caller, callee, line) once."""
    tree, calls = Tree(root), derive in ("calls", "returns", "methods")
    CALL_DERIVED[0], RECEIVER_ONLY[0] = None, derive == "methods"
    if derive in ("returns", "methods"):
        CALL_DERIVED[0] = _returns_rule(tree)
    entry = tree.functions(ENTRY[0])[ENTRY[1]]
    first = _params(entry.node, False)[0][0]
    steps: dict[tuple[str, str, int], Step] = {}
    seen: set[tuple[str, frozenset[str]]] = set()
    stack = [(entry, frozenset({first}))]
    while stack:
        fn, start = stack.pop()
        if (fn.key, start) in seen:
            continue
        seen.add((fn.key, start))
        walked = walked_names(fn.node, set(start), calls)
        local = imports_of(list(ast.walk(fn.node)), fn.module, tree)
        for call in (n for n in ast.walk(fn.node) if isinstance(n, ast.Call)):
            callee = _callee(tree, fn, call, local)
            if callee is None:
                continue
            landed = _landing(callee, call, walked, calls)
            if not landed:
                continue
            inner = walked_names(callee.node, landed, calls)
            steps.setdefault((fn.key, callee.key, call.lineno),
                             Step(fn.key, callee.key, call.lineno, _returns_walked(callee.node, inner, calls)))
            stack.append((callee, frozenset(landed)))
    return list(steps.values())


def layer_rank(module: str) -> int:
    from tests.test_architecture import RANK

    parts = module.split(".")
    return RANK.get(parts[1] if len(parts) > 1 else parts[0], -1)


def _module(key: str) -> str:
    return key.split(":")[0]


def _in_quantize(key: str) -> bool:
    return _module(key).startswith("trtforge.quantize")


#: Definitions of "a climb back up a floor" on a step; a floor is a layer of tests/test_architecture.py's LAYERS,
#: or, for the ``module`` definitions, a module (a call into another module and back).
DEFINITIONS: dict[str, Callable[[Step], bool]] = {
    "step": lambda s: True,  # every call returns: a step down is a climb back up
    "return-of-value": lambda s: s.returns,  # the value comes back up to its caller
    "call-up-a-layer": lambda s: layer_rank(_module(s.callee)) > layer_rank(_module(s.caller)),
    "down-a-layer-and-back": lambda s: layer_rank(_module(s.callee)) < layer_rank(_module(s.caller)),
    "down-a-layer-value-back": lambda s: s.returns and layer_rank(_module(s.callee)) < layer_rank(_module(s.caller)),
    "other-module-and-back": lambda s: _module(s.callee) != _module(s.caller),
    "other-module-value-back": lambda s: s.returns and _module(s.callee) != _module(s.caller),
}

#: Which steps are "inside quantize/": the caller's module, the callee's, or both.
INSIDE: dict[str, Callable[[Step], bool]] = {
    "callee": lambda s: _in_quantize(s.callee),
    "caller": lambda s: _in_quantize(s.caller),
    "both": lambda s: _in_quantize(s.callee) and _in_quantize(s.caller),
}


def counts(steps: list[Step], definition: str, inside: str = "callee") -> dict[str, int]:
    climbs = [s for s in steps if DEFINITIONS[definition](s)]
    return {"all": len(climbs), "quantize": sum(INSIDE[inside](s) for s in climbs)}


if __name__ == "__main__":
    root = Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    for derive in ("names", "methods", "returns", "calls"):
        steps = walk(root, derive)
        for definition in DEFINITIONS:
            row = {inside: counts(steps, definition, inside) for inside in INSIDE}
            print(f"{derive:5} {definition:26} all {row['callee']['all']:4}  quantize callee "
                  f"{row['callee']['quantize']:4} caller {row['caller']['quantize']:4} both {row['both']['quantize']:4}")
