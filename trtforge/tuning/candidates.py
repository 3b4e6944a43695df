"""What ``trtforge tune`` sweeps: route × precision × batch × profile opt batch × builder knobs, cheap first.

Only what this device accelerates is tried: the TensorRT route's precisions come from the capability table
(``builder.capability``) for this GPU; a route that cannot run here is a ``Skip`` with its one-line reason. A
TensorRT build that cannot be timed here is still made (it proves the precision builds, and the onnxruntime
route runs its processed graph), at the first opt batch and optimization level only.

Example:
    >>> plan = plan_sweep(TuneConfig(routes=("eager", "onnxruntime"), batches=(1, 4)), facts, has_model=True)
    >>> [c.key for c in plan.candidates][:2]
    ['eager/fp32/b1', 'eager/fp32/b4']
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trtforge.builder.capability import FLAVOUR_LABEL, SCHEME_OF_PRECISION, known_ccs, runs_as
from trtforge.core.config import FLOAT_PRECISIONS, OPTIMIZATION_LEVELS, PRECISIONS
from trtforge.core.errors import InvalidArgument, spelled
from trtforge.core.routes import ENGINE_ROUTES, ROUTE_NAMES, ROUTE_PRECISION, TORCH_ROUTES

#: What the choice optimises: the lowest p99 latency, or the highest throughput (items per second).
OBJECTIVES: tuple[str, ...] = ("latency", "throughput")
#: The TensorRT route's name (the route that runs the built engine).
ENGINE_ROUTE = ENGINE_ROUTES[0]
#: The route that runs the processed ONNX graph of a build (the FP32 reference runs there too).
GRAPH_ROUTE = ENGINE_ROUTES[1]
#: Cheap first: routes that need no build, then the processed graph, then engines, then ``compiled`` (minutes).
ROUTE_COST: dict[str, int] = {name: {ENGINE_ROUTE: 3, GRAPH_ROUTE: 1}.get(name, 0) for name in ROUTE_NAMES} | {
    TORCH_ROUTES[-1]: 4}


@dataclass(frozen=True)
class TuneConfig:
    """Every option of one ``tune`` run. Empty tuples mean the defaults this device gives (``plan_sweep``).

    Example:
        >>> TuneConfig(routes=("eager",), batches=(1, 8), max_minutes=5).max_seconds
        300.0
    """

    routes: tuple[str, ...] = ()
    precisions: tuple[str, ...] = ()
    batches: tuple[int, ...] = (1, 8)
    opt_levels: tuple[int, ...] = ()
    max_minutes: float = 10.0
    max_p99_ms: float | None = None
    min_accuracy: float | None = None
    objective: str | None = None
    warmup: int = 5
    repeats: int = 50
    device: str | None = None

    def __post_init__(self) -> None:
        for name in ("routes", "precisions", "batches", "opt_levels"):
            value = getattr(self, name)
            object.__setattr__(self, name, tuple(dict.fromkeys((value,) if isinstance(value, (str, int)) else value)))
        check_config(self)

    @property
    def max_seconds(self) -> float:
        return float(self.max_minutes) * 60.0

    @property
    def chosen_by(self) -> str:
        """The objective: as given, else throughput under a latency bound, else latency."""
        return self.objective or (OBJECTIVES[1] if self.max_p99_ms is not None else OBJECTIVES[0])


def _flag(cli: str, python: str) -> str:
    return spelled(cli=cli, python=python)


def check_config(config: TuneConfig) -> None:
    """Refuse bad options in one line each, before any work."""
    unknown = [r for r in config.routes if r not in ROUTE_NAMES]
    if unknown:
        raise InvalidArgument(f"{_flag('--route', 'routes=')} {', '.join(unknown)}: unknown route; choose from "
                              f"{', '.join(ROUTE_NAMES)}")
    unknown = [p for p in config.precisions if p not in PRECISIONS]
    if unknown:
        raise InvalidArgument(f"{_flag('--precision', 'precisions=')} {', '.join(unknown)}: unknown precision; "
                              f"choose from {', '.join(PRECISIONS)}")
    if not config.batches or any(not isinstance(b, int) or b < 1 for b in config.batches):
        raise InvalidArgument(f"{_flag('--batch', 'batches=')} {list(config.batches)}: give batch sizes of 1 or more")
    if any(level not in OPTIMIZATION_LEVELS for level in config.opt_levels):
        raise InvalidArgument(f"{_flag('--opt-level', 'opt_levels=')} {list(config.opt_levels)}: optimization levels "
                              f"are {OPTIMIZATION_LEVELS.start}..{OPTIMIZATION_LEVELS.stop - 1}")
    if not config.max_minutes > 0:
        raise InvalidArgument(f"{_flag('--max-minutes', 'max_minutes=')} {config.max_minutes}: the time budget must be "
                              "above 0, e.g. 10")
    for value, name in ((config.max_p99_ms, ("--max-p99-ms", "max_p99_ms=")),
                        (config.min_accuracy, ("--min-accuracy", "min_accuracy="))):
        if value is not None and not value > 0:
            raise InvalidArgument(f"{_flag(*name)} {value}: give a positive bound")
    if config.min_accuracy is not None and config.min_accuracy > 1:
        raise InvalidArgument(f"{_flag('--min-accuracy', 'min_accuracy=')} {config.min_accuracy}: accuracy is the "
                              "top-1 agreement or cosine with the FP32 reference, at most 1 (e.g. 0.99)")
    if config.objective is not None and config.objective not in OBJECTIVES:
        raise InvalidArgument(f"{_flag('--objective', 'objective=')} {config.objective}: choose "
                              f"{' or '.join(OBJECTIVES)}")
    if config.warmup < 0 or config.repeats < 1:
        raise InvalidArgument(f"warmup={config.warmup}, repeats={config.repeats}: time at least one call")


@dataclass(frozen=True)
class Candidate:
    """One point of the sweep. ``opt_batch`` and ``opt_level`` are the TensorRT route's build knobs (the
    onnxruntime and PyTorch routes do not depend on them: None)."""

    route: str
    precision: str
    batch: int
    opt_batch: int | None = None
    opt_level: int | None = None

    @property
    def key(self) -> str:
        knobs = "" if self.opt_batch is None else f"/ob{self.opt_batch}/O{self.opt_level}"
        return f"{self.route}/{self.precision}/b{self.batch}{knobs}"

    @property
    def builder(self) -> dict[str, int]:
        """The builder knobs, as the JSON's ``builder`` object."""
        return {} if self.opt_level is None else {"optimization_level": self.opt_level}

    @property
    def cost(self) -> tuple:
        return (ROUTE_COST[self.route], PRECISIONS.index(self.precision), self.opt_level or 0,
                self.opt_batch or 0, self.batch)


@dataclass(frozen=True)
class Skip:
    """A route (or a precision on it) that is not timed here, and why, in one line."""

    route: str
    why: str


@dataclass(frozen=True)
class Cut:
    """A candidate the time budget cut, and why: the budget ran out, or what is left would not cover what the
    route's last candidate took (a ``compiled`` candidate compiles for minutes)."""

    candidate: Candidate
    why: str = "the time budget ran out before it"

    @property
    def key(self) -> str:
        return self.candidate.key

    @property
    def route(self) -> str:
        return self.candidate.route


@dataclass(frozen=True)
class DeviceFacts:
    """What the plan needs of this machine: a CUDA GPU's compute capability (None: no GPU) and the TensorRT
    flavour and version that build here."""

    cc: str | None
    flavour: str
    version: str

    @property
    def engine_refusal(self) -> str | None:
        """Why engines built here cannot be timed here, or None."""
        label = FLAVOUR_LABEL.get(self.flavour, self.flavour)
        if not self.flavour:
            return "no TensorRT bindings are installed here (pip install tensorrt, or tensorrt-rtx); tune times the other routes"
        if self.cc is None:
            return (f"no CUDA GPU here: {label} engines are built (each precision builds) but not timed; "
                    "run tune on the GPU that will serve")
        if self.cc not in known_ccs(self.flavour):
            return f"{label} {self.version} does not run on {self.cc}; tune times the other routes"
        return None

    def accelerates(self, precision: str) -> bool:
        """True when the capability table runs ``precision`` accelerated on this GPU (convolutions or GEMMs)."""
        scheme = SCHEME_OF_PRECISION.get(precision, precision)
        return self.cc is not None and any(scheme in runs_as(self.flavour, self.version, self.cc, op)
                                           for op in ("conv", "gemm"))


@dataclass(frozen=True)
class SweepPlan:
    """The candidates in the order they run, what is skipped, and the builds the engine route needs."""

    candidates: tuple[Candidate, ...]
    skipped: tuple[Skip, ...] = ()
    precisions: tuple[str, ...] = field(default=())
    opt_levels: tuple[int, ...] = field(default=())


def default_routes(facts: DeviceFacts) -> tuple[str, ...]:
    """Every route on a GPU; on the CPU those whose numbers mean something there (not the FP16 PyTorch routes,
    which run plain FP16 on the CPU), the engine route included to say why it is skipped."""
    if facts.cc is not None:
        return ROUTE_NAMES
    return tuple(r for r in ROUTE_NAMES if ROUTE_PRECISION[r] != FLOAT_PRECISIONS[1])


def default_precisions(facts: DeviceFacts) -> tuple[str, ...]:
    """The float precisions this GPU accelerates; without a GPU (or one the flavour does not run on), FP32 and
    FP16. Quantized precisions are tried when asked for (they calibrate on the data)."""
    if facts.engine_refusal is None:
        return tuple(p for p in FLOAT_PRECISIONS if facts.accelerates(p))
    return FLOAT_PRECISIONS[:2]


def plan_sweep(config: TuneConfig, facts: DeviceFacts, *, has_model: bool) -> SweepPlan:
    """The candidates of ``config`` on this device, cheap first, and the skipped routes with their reasons."""
    routes = config.routes or default_routes(facts)
    precisions = config.precisions or default_precisions(facts)
    levels = config.opt_levels or (3,)
    batches = tuple(sorted(config.batches))
    found: list[Candidate] = []
    skipped: list[Skip] = []
    for route in routes:
        if route in TORCH_ROUTES:
            fixed = ROUTE_PRECISION[route]
            if not has_model:
                skipped.append(Skip(route, f"route {route} runs the PyTorch model, and tune was given a graph; "
                                           "give the model (a module, or package.module:function)"))
            elif fixed not in precisions:
                skipped.append(Skip(route, f"route {route} computes in {fixed}, which is not among the precisions "
                                           f"tried ({', '.join(precisions)})"))
            else:
                found += [Candidate(route, fixed, b) for b in batches]
        elif route == GRAPH_ROUTE and not facts.flavour:
            skipped.append(Skip(route, f"route {route} runs the graph a build writes, and no TensorRT is installed "
                                       "here to build it; tune times the PyTorch routes"))
        elif route == GRAPH_ROUTE:
            found += [Candidate(route, p, b) for p in precisions for b in batches]
        else:
            found += _engine_candidates(facts, precisions, levels, batches, skipped)
    return SweepPlan(tuple(sorted(found, key=lambda c: c.cost)), tuple(skipped), precisions, levels)


def _engine_candidates(facts: DeviceFacts, precisions: tuple[str, ...], levels: tuple[int, ...],
                       batches: tuple[int, ...], skipped: list[Skip]) -> list[Candidate]:
    refusal = facts.engine_refusal
    if refusal is not None:
        skipped.append(Skip(ENGINE_ROUTE, f"route {ENGINE_ROUTE}: {refusal}"))
        return []
    label = FLAVOUR_LABEL.get(facts.flavour, facts.flavour)
    slow = [p for p in precisions if not facts.accelerates(p)]
    if slow:
        skipped.append(Skip(ENGINE_ROUTE, f"route {ENGINE_ROUTE}: {label} {facts.version} does not accelerate "
                                          f"{', '.join(slow)} on {facts.cc} (capability table)"))
    return [Candidate(ENGINE_ROUTE, p, b, opt, level) for p in precisions if p not in slow
            for level in levels for opt in batches for b in batches]
