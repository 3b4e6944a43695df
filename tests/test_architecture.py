"""The architecture, checked on the source: imports point one way (the invariant of the design sketch,
``../shared/DESIGN.md`` beside the clone), no import cycles (function-level imports included), TensorRT only
through the shim, short functions and modules, every vocabulary named in one module, and the layer lines of
README.md and docs/DEVELOPING.md equal to ``LAYERS``."""

from __future__ import annotations

import ast
import re
from dataclasses import MISSING
from dataclasses import fields as dataclass_fields
from functools import cache
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "trtforge"
REPO = PACKAGE.parent

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
    ("measure",),
    ("serve",),
    ("artifact",),
    ("pipeline", "refit"),
    ("debug", "conformance", "tuning"),
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


@cache
def nodes(path: Path) -> tuple[ast.AST, ...]:
    """Every AST node of ``path``: each file is read and parsed once per run, whichever rule walks it."""
    return tuple(ast.walk(ast.parse(path.read_text())))


@cache
def sources() -> tuple[Path, ...]:
    """The package's modules, sorted."""
    return tuple(sorted(PACKAGE.rglob("*.py")))


def trtforge_imports(path: Path) -> set[str]:
    """Every ``trtforge.X.Y`` module that ``path`` imports, at module level or inside functions."""
    found = set()
    for node in nodes(path):
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
            for p in sources()}


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
        for path in sources()
        for node in nodes(path)
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
        for path in sources()
        if path != PACKAGE / "core" / "trt.py" and {"tensorrt", "tensorrt_rtx"} & {
            (n.module or "").split(".")[0] if isinstance(n, ast.ImportFrom) else a.name.split(".")[0]
            for n in nodes(path) if isinstance(n, (ast.Import, ast.ImportFrom))
            for a in (n.names if isinstance(n, ast.Import) else [n])
        }
    ]
    assert not direct, f"import TensorRT through trtforge.core.trt, not directly: {direct}"


def test_no_module_over_600_lines():
    long = sorted(f"{path.relative_to(REPO)} ({n} lines)" for path in sources()
                  if (n := len(path.read_text().splitlines())) > 600)
    assert not long, "split these modules (at most 600 lines):\n" + "\n".join(long)


def layer_line() -> str:
    """``LAYERS`` as the docs write it: ``core → capture → ... → builder, convert → ... → cli``."""
    return " → ".join(", ".join(name for name in layer if name != "_version") for layer in LAYERS)


def test_the_docs_layer_lines_are_layers():
    """docs/DEVELOPING.md states the layer order, and README.md (if it still does) states the same one."""
    expected = layer_line()
    for doc, required in (("docs/DEVELOPING.md", True), ("README.md", False)):
        lines = [line.strip().strip("`") for line in (REPO / doc).read_text().splitlines()
                 if line.strip().strip("`").startswith("core → ")]
        assert lines or not required, f"{doc} lost its layer line; write it as: {expected}"
        assert all(line == expected for line in lines), f"{doc}'s layer line differs from LAYERS; write: {expected}"


# -- every vocabulary named once -------------------------------------------------------------------------
def vocabularies() -> dict[str, tuple[str, frozenset[str]]]:
    """Vocabulary → (the one module that names it, its names)."""
    from trtforge.builder.capability import RUNS_AS
    from trtforge.core.budget import METRICS
    from trtforge.core.gpu_targets import TARGETS
    from trtforge.core.precisions import BY_NAME
    from trtforge.core.routes import ROUTE_NAMES

    return {"precision": ("trtforge/core/precisions.py", frozenset(BY_NAME)),
            "route": ("trtforge/core/routes.py", frozenset(ROUTE_NAMES)),
            "metric": ("trtforge/core/budget.py", frozenset(METRICS)),
            "runs_as": ("trtforge/builder/capability.py", frozenset(RUNS_AS)),
            "gpu_target": ("trtforge/core/gpu_targets.py", frozenset(t.name for t in TARGETS))}


#: Tables keyed by a vocabulary's names (data about each name, not a re-listing): (module, vocabulary, why).
#: Their keys must be names of the vocabulary.
TABLES: tuple[tuple[str, str, str], ...] = (
    ("trtforge/debug/tolerances.py", "metric", "TOLERANCES: the limit per metric; LayerError.value per metric"),
    ("trtforge/core/metrics.py", "metric", "PER_SAMPLE: each metric's per-sample function"),
    ("trtforge/quantize/report.py", "metric", "the measured values, by metric name"),
    ("trtforge/builder/quantized_layers.py", "runs_as", "SCHEMES: (activation, weight) dtype family -> scheme"),
    ("trtforge/runtime/load.py", "route", "LOADERS: each route's loader and refusal"),
)
#: Selections of a vocabulary that are a choice, not a definition: (module, vocabulary, why).
SELECTIONS: tuple[tuple[str, str, str], ...] = (
    ("trtforge/cli/demo.py", "precision", "the demo builds FP32 and FP16 side by side"),
    ("trtforge/builder/capability.py", "precision",
     "RUNS_AS and the capability rows: what each GPU runs, a hardware vocabulary that shares names with precisions"),
)


#: A run of words joined by | , or / ("fp32 | fp16 | bf16", "eager, fp16, cuda_graph").
LISTED = re.compile(r"[\w-]+(?:\s*[|,/]\s*[\w-]+)+")


def vocabulary_listings(path: Path, names: frozenset[str]) -> list[tuple[int, str, list[str]]]:
    """``(line, kind, names)`` of every literal in ``path`` that lists two or more of ``names``: a tuple, list
    or set (kind "list"), a dict's keys (kind "table"), or a string such as ``"fp32 | fp16 | bf16"``."""
    found = []
    for node in nodes(path):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            kind, items = "list", node.elts
        elif isinstance(node, ast.Dict):
            kind, items = "table", [k for k in node.keys if k is not None]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            hits = [w for run in LISTED.finditer(node.value) for w in re.findall(r"[\w-]+", run.group(0))
                    if w in names]
            if len(set(hits)) >= 3:
                found.append((node.lineno, "string", hits))
            continue
        else:
            continue
        hits = [i.value for i in items if isinstance(i, ast.Constant) and i.value in names]
        if len(set(hits)) >= 2:
            found.append((node.lineno, kind, hits))
    return found


@pytest.mark.parametrize("vocabulary", ["precision", "route", "metric", "runs_as", "gpu_target"])
def test_each_vocabulary_is_named_in_one_module(vocabulary):
    """A list of precisions (routes, metrics) anywhere but its module is a second vocabulary: import it."""
    vocab = vocabularies()
    home, names = vocab[vocabulary]
    others = set().union(*(n for v, (_, n) in vocab.items() if v != vocabulary))
    tables = {m for m, v, _ in TABLES if v == vocabulary}
    selections = {m for m, v, _ in SELECTIONS if v == vocabulary}
    offenders = []
    for path in sources():
        module = path.relative_to(REPO).as_posix()
        if module == home:
            continue
        for line, kind, hits in vocabulary_listings(path, names):
            if set(hits) <= others:  # "fp16" is a route and a precision: a list of precisions is not of routes
                continue
            if (kind == "table" and module in tables) or (kind != "string" and module in selections):
                continue
            if kind == "string" and vocabulary == "gpu_target":  # a message's example, "--target sm86,sm89,sm120"
                continue
            offenders.append(f"{module}:{line} {kind} {hits}")
    assert not offenders, f"import the {vocabulary} names from {home}, do not re-list them:\n" + "\n".join(offenders)


def test_vocabulary_tables_name_only_known_names():
    from trtforge.core.budget import METRICS
    from trtforge.core.config import PRECISIONS
    from trtforge.debug.layerwise import LAYER_THRESHOLDS
    from trtforge.debug.tolerances import TOLERANCES

    assert set(TOLERANCES) <= set(PRECISIONS) and set(LAYER_THRESHOLDS) <= set(PRECISIONS)
    assert all(set(limits) <= set(METRICS) for limits in TOLERANCES.values())


def test_every_precision_record_is_complete():
    """Every precision gives every field, each one a name its consumer knows (``core.precisions``)."""
    from trtforge.builder.capability import OP_CLASSES, RUNS_AS
    from trtforge.core.budget import METRICS
    from trtforge.core.precisions import FIELDS, RECORDS, Tolerance
    from trtforge.core.quant_plan import QUANT_DTYPES
    from trtforge.quantize.placement import RULE_SETS

    assert all(f.default is MISSING and f.default_factory is MISSING for f in dataclass_fields(RECORDS[0])), \
        "a Precision field with a default lets a new precision leave it out"
    assert {f.name for f in dataclass_fields(Tolerance)} <= set(METRICS)
    for p in RECORDS:
        assert set(FIELDS) <= set(vars(p)), p.name
        assert {p.activation_dtype, p.weight_dtype} - {None} <= set(QUANT_DTYPES), p.name
        assert p.scheme is None or p.scheme in RUNS_AS, p.name
        assert set(p.op_classes) <= set(OP_CLASSES), p.name
        assert p.placement is None or p.placement in RULE_SETS, p.name


def test_every_route_has_a_loader_and_a_refusal():
    """``trtforge.load`` and ``route_refusal`` dispatch through one registry, and it holds every route."""
    from trtforge.core.routes import ROUTE_NAMES
    from trtforge.runtime.load import LOADERS

    assert set(LOADERS) == set(ROUTE_NAMES)
    assert all(callable(entry.load) and callable(entry.refusal) for entry in LOADERS.values())


#: The registry of what an engine can do: ``Engine`` and its optional abilities, each a ``typing.Protocol``.
ENGINE_PROTOCOLS = PACKAGE / "runtime" / "protocol.py"
#: Route facts read from the route's record, never from the engine (``core.routes.ROUTE_PRECISION``).
ROUTE_RECORD_FACTS = frozenset({"precision"})


@cache
def engine_abilities() -> frozenset[str]:
    """Every member a ``Protocol`` class of ``runtime/protocol.py`` declares (attributes, properties, methods)."""
    names = set()
    for node in nodes(ENGINE_PROTOCOLS):
        if isinstance(node, ast.ClassDef) and any(getattr(b, "id", getattr(b, "attr", "")) == "Protocol"
                                                  for b in node.bases):
            names |= {item.target.id for item in node.body
                      if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)}
            names |= {item.name for item in node.body if isinstance(item, ast.FunctionDef)}
    return frozenset(names)


def ability_probes(path: Path, names: frozenset[str]) -> list[tuple[int, str]]:
    """``getattr(x, "name", ...)`` / ``hasattr(x, "name")`` calls of ``path`` whose name is in ``names``."""
    return [(node.lineno, node.args[1].value) for node in nodes(path)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
            and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and node.args[1].value in names]


def test_engine_abilities_are_declared_not_probed():
    """Issue 36, build item 6: what an engine can do is read from one place, ``runtime/protocol.py``'s protocols
    (``isinstance(engine, ReplayingEngine)``), and a route's precision from its record; never probed by name."""
    names = engine_abilities() | ROUTE_RECORD_FACTS
    assert {"profiles", "device", "join", "cuda_graph", "skips_preprocessing", "runtime_cache_loaded", "evaluator",
            "move_inputs"} <= names
    found = {path.relative_to(REPO).as_posix(): probes for path in sources()
             if path != ENGINE_PROTOCOLS and (probes := ability_probes(path, names))}
    assert not found, f"declare the ability as a protocol in runtime/protocol.py and test isinstance: {found}"


def test_the_ability_scan_can_fail(tmp_path):
    source = tmp_path / "m.py"
    source.write_text('a = getattr(engine, "cuda_graph", False)\nb = hasattr(engine, "join")\n'
                      'c = getattr(engine, "name")\nd = getattr(engine, key)\n')
    assert ability_probes(source, engine_abilities()) == [(1, "cuda_graph"), (2, "join")]


def test_every_gpu_target_is_known():
    """The capability rows, the docs' GPU table and the flavour lists name only targets of ``core.gpu_targets``."""
    from trtforge.builder.capability import DOC_ROWS, TABLE
    from trtforge.core.gpu_targets import FULL_CCS, GENERATIONS, RTX_CCS, RTX_PORTABLE_TARGETS, TARGETS

    known = {t.name for t in TARGETS}
    runs = {"tensorrt_rtx": set(RTX_CCS), "tensorrt": set(FULL_CCS)}
    assert set(RTX_PORTABLE_TARGETS) <= set(RTX_CCS) and set(GENERATIONS) <= known
    for row in TABLE:
        assert set(row.ccs) <= runs[row.flavour], row
    for flavour, _, gpus in DOC_ROWS:
        assert {cc for cc, _ in gpus} <= runs[flavour], flavour


def test_the_vocabulary_scan_can_fail(tmp_path):
    source = tmp_path / "m.py"
    source.write_text('A = ("fp32", "fp16")\nB = {"int8": 1, "bf16": 2}\nC = "fp32 | fp16 | bf16"\nD = "fp16"\n')
    found = vocabulary_listings(source, vocabularies()["precision"][1])
    assert [(line, kind) for line, kind, _ in found] == [(1, "list"), (2, "table"), (3, "string")]


def test_default_batch_is_defined_once():
    defined = sorted(path.relative_to(REPO).as_posix() for path in sources()
                     for node in nodes(path)
                     if isinstance(node, (ast.Assign, ast.AnnAssign))
                     and "DEFAULT_BATCH" in {t.id for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
                                             if isinstance(t, ast.Name)})
    assert defined == ["trtforge/core/batch.py"], f"import DEFAULT_BATCH from trtforge.core.batch: {defined}"


def _calls_of(path: Path, names: set[str]) -> list[int]:
    """Lines of ``path`` that call a method or function named in ``names`` (docstrings do not count)."""
    return [node.lineno for node in nodes(path) if isinstance(node, ast.Call)
            and (node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")) in names]


def test_one_builder_builds_and_derives_profiles():
    """Issue 23: every engine (ONNX path, direct path, partitions) is built by ``builder.build.build_network``,
    and every optimisation profile is made there from ``builder.profiles.resolve_profiles``."""
    owners = {"build_serialized_network": {"trtforge/builder/build.py"},
              "create_optimization_profile": {"trtforge/builder/build.py"}}
    for call, allowed in owners.items():
        found = {path.relative_to(REPO).as_posix() for path in sources() if _calls_of(path, {call})}
        assert found == allowed, f"{call} is called outside the one builder: {sorted(found - allowed)}"


def test_the_builder_scan_can_fail(tmp_path):
    source = tmp_path / "m.py"
    source.write_text('"""builder.build_serialized_network(net, cfg) in a docstring"""\n'
                      "plan = builder.build_serialized_network(net, cfg)\n")
    assert _calls_of(source, {"build_serialized_network"}) == [2]


# -- quantize/: core, methods, drivers --------------------------------------------------------------------
#: The floors inside ``trtforge.quantize``, low to high: its core (data, observers, calibration, placement,
#: precision, plan, report, ``method``: what a method is), ``methods/`` (one pass each), and the drivers (the one
#: driver of the methods and the flows that call it). Everything not named here is core.
QUANTIZE_DRIVERS = frozenset({"driver", "quantizer", "module_quantizer", "auto_precision"})
#: A method's own helper modules (the rest of a method is its one module).
METHOD_FAMILIES = {"distill": "finetune", "torch_graph": "finetune"}
#: The most climbs the walk of ``compile``'s first parameter may make inside ``quantize/`` (issue 36).
MAX_QUANTIZE_CLIMBS = 15


def quantize_floor(module: str) -> int:
    parts = module.split(".")
    if parts[:3] == ["trtforge", "quantize", "methods"]:
        return 1
    return 2 if len(parts) > 2 and parts[2] in QUANTIZE_DRIVERS else 0


def method_family(module: str) -> str | None:
    parts = module.split(".")
    return METHOD_FAMILIES.get(parts[3], parts[3]) if parts[:3] == ["trtforge", "quantize", "methods"] and len(parts) > 3 \
        else None


def quantize_climbs(imports: dict[str, list[str]]) -> list[str]:
    """Each name a quantize module imports (module level or in a function) from a higher floor, or from another
    method's module (a method reaching into another method instead of the core)."""
    found = []
    for module, targets in imports.items():
        for target in targets:
            across = quantize_floor(module) == quantize_floor(target) == 1 and None not in \
                (method_family(module), method_family(target)) and method_family(module) != method_family(target)
            if quantize_floor(target) > quantize_floor(module) or across:
                found.append(f"{module} imports {target}")
    return found


def quantize_imports(path: Path) -> list[str]:
    """Every ``trtforge.quantize`` module ``path`` imports from, once per name imported."""
    found = []
    for node in nodes(path):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("trtforge.quantize"):
            found += [f"{node.module}.{a.name}" if module_path(f"{node.module}.{a.name}") else node.module
                      for a in node.names]
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith("trtforge.quantize")]
    return found


def test_the_walk_of_compiles_model_climbs_inside_quantize_at_most_15_times():
    """The modules ``trtforge.compile`` reaches (imports, function-level ones too) walk its first parameter;
    inside ``quantize/`` they may climb back up a floor (core → methods → drivers) at most 15 times. A new
    method is one module of ``methods/`` and one entry of ``METHODS``: it needs nothing above the core."""
    graph, seen, stack = import_graph(), set(), ["trtforge.pipeline.verb"]
    while stack:
        module = stack.pop()
        if module not in seen:
            seen.add(module)
            stack.extend(graph.get(module, ()))
    walked = {m: quantize_imports(module_path(m)) for m in sorted(seen) if m.startswith("trtforge.quantize")}
    assert "trtforge.quantize.driver" in walked and "trtforge.quantize.methods.gptq" in walked
    climbs = quantize_climbs(walked)
    assert len(climbs) <= MAX_QUANTIZE_CLIMBS, "\n".join(climbs)


def test_the_climb_count_can_fail():
    assert quantize_climbs({"trtforge.quantize.placement": ["trtforge.quantize.methods.gptq"],
                            "trtforge.quantize.methods.gptq": ["trtforge.quantize.driver", "trtforge.quantize.report",
                                                               "trtforge.quantize.methods.awq"],
                            "trtforge.quantize.methods.distill": ["trtforge.quantize.methods.torch_graph"]}) == [
        "trtforge.quantize.placement imports trtforge.quantize.methods.gptq",
        "trtforge.quantize.methods.gptq imports trtforge.quantize.driver",
        "trtforge.quantize.methods.gptq imports trtforge.quantize.methods.awq"]
