"""``trtforge selftest``: the first command on a new machine, and one JSON to attach to a bug report.

What it does, in order:

1. ``doctor``: the machine (torch, CUDA, driver, GPUs, TensorRT flavours, ONNX Runtime) and, per GPU,
   whether TensorRT-RTX or full TensorRT can run engines there;
2. builds the zoo's EfficientNet-Lite0 (real weights) at FP16 through the engine cache (a second run is
   a cache hit), in ``SELFTEST_PRECISIONS``;
3. checks each engine with ``check`` (photo crops, against its FP32 reference in ONNX Runtime) on the
   route asked for (default ``tensorrt``), on ``cuda_graph`` (the PyTorch route to beat) where CUDA is
   present, else ``eager``, and on ``onnxruntime``; each route's steady-state latency is set against
   ``cuda_graph``'s;
4. writes one JSON report (``--json PATH``).

A route that cannot run here is refused in one line and the rest still run: on a machine without a
GPU no engine can run (the PyTorch and ONNX Runtime parts still do); on a GPU TensorRT-RTX refuses
(an H200 is sm90) without full TensorRT, the TensorRT route gets doctor's one line. A build the
installed TensorRT refuses is one line too.

Example:
    >>> report = run_selftest(route="tensorrt", samples=16, repeats=5)
    >>> [(r["route"], r["ran"]) for r in report["engines"][0]["routes"]]
    [('tensorrt', False), ('eager', True), ('onnxruntime', True)]
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from trtforge.core.atomic import atomic_write_bytes
from trtforge.core.errors import InvalidArgument, NotAFolder, UserError
from trtforge.core.sidecar import read_sidecar

#: Precisions the self-test builds. INT8 and FP8 join where the GPU runs them, once a table of what
#: each GPU runs exists (today: FP16 only).
SELFTEST_PRECISIONS: tuple[str, ...] = ("fp16",)
#: The PyTorch route every other route is timed against (on a GPU).
BASELINE = "cuda_graph"
#: Lite0's batch range, the demo's: a self-test after ``trtforge demo`` is a cache hit.
BATCH = (1, 8, 32)


@dataclass(frozen=True)
class RouteResult:
    """One route on one engine: did it run, its metric against the reference, its latency."""

    route: str
    ran: bool
    line: str
    passed: bool | None = None
    metric: str | None = None
    worst: float | None = None
    limit: float | None = None
    steady_ms: float | None = None
    first_call_ms: float | None = None
    vs_baseline: float | None = None


def check_json_path(path: Path | None) -> None:
    """Refuse a report path that cannot be written, before any work."""
    if path is None:
        return
    if path.is_dir():
        raise InvalidArgument(f"--json {path}: is a folder; name a file, e.g. {path / 'selftest.json'}")
    if not path.parent.is_dir():
        raise NotAFolder(f"--json {path}: folder {path.parent} does not exist; create it or name another file")


def routes_to_run(route: str, cuda: bool) -> list[str]:
    """The route asked for, the PyTorch baseline (``cuda_graph`` on a GPU, ``eager`` without), ONNX Runtime."""
    routes = [route, BASELINE if cuda else "eager", "onnxruntime"]
    return list(dict.fromkeys(routes))


def _worst(judgement: Any) -> float:
    """The deciding metric on the output furthest from passing (the lowest of a floor, the highest of a ceiling)."""
    from trtforge.core.budget import METRICS

    field = "top1" if judgement.metric == "top1_agreement" else judgement.metric
    values = [v for v in (getattr(o, field) for o in judgement.outputs) if v is not None]
    return min(values) if METRICS[judgement.metric].op == ">=" else max(values)


def check_route(sidecar: Path, route: str, samples: int, repeats: int) -> RouteResult:
    """``check`` on one route; a route that cannot run here (a user error) is one line."""
    import torch

    from trtforge.debug.check import check_artifact

    if route == BASELINE and not torch.cuda.is_available():  # on a CPU it would be plain FP16 torch
        return RouteResult(route, False, f"--route {route}: cannot run here: CUDA graphs need a CUDA GPU and torch "
                                         "sees none; the same module runs on the CPU with --route fp16")
    try:
        report = check_artifact(sidecar, route=route, samples=samples, repeats=repeats)
    except UserError as exc:
        line = str(exc)
        return RouteResult(route, False, line if line.startswith(f"--route {route}") else f"--route {route}: {line}")
    j, t = report.judgement, report.timing
    verdict = "PASS" if report.passed else f"FAIL ({'; '.join(j.failures)})"
    return RouteResult(route, True, f"{route} on {report.device}: {verdict}", report.passed, j.metric,
                       float(_worst(j)), j.limit, t.steady_ms, t.first_call_ms)


def _build(model: Any, precision: str, folder: Path) -> tuple[Any, str | None]:
    """(the artifact, None), or (None, the one line saying why the installed TensorRT refused it)."""
    import torch

    import trtforge

    try:
        art = trtforge.compile(model, (torch.zeros(1, 3, 224, 224),), precision=precision, batch=BATCH,
                               output_dir=folder, progress=False, overwrite=True)
    except UserError as exc:
        return None, (f"build {precision}: {exc} (build it where this TensorRT builds, then "
                      "trtforge selftest --artifact SIDECAR.json here)")
    return art, None


def _engine_report(sidecar: Any, precision: str, routes: list[str], samples: int, repeats: int,
                   console: Console) -> dict[str, Any]:
    results = []
    for route in routes:
        with console.status(f"{precision}: checking route {route}…"):
            results.append(check_route(sidecar.path, route, samples, repeats))
        console.print(f"  {escape(results[-1].line)}", soft_wrap=True)
    baseline = next((r for r in results if r.route == BASELINE and r.ran), None)
    if baseline is not None:
        results = [r if not r.ran else RouteResult(**{**asdict(r), "vs_baseline": r.steady_ms / baseline.steady_ms})
                   for r in results]
    builder = sidecar.builder
    return {"precision": precision, "sidecar": str(sidecar.path), "engine_sha256": sidecar.engine_sha256,
            "builder": {"flavour": builder.flavour, "version": builder.version, "targets": list(builder.targets),
                        "build_seconds": builder.build_seconds},
            "routes": [asdict(r) for r in results]}


def _machine(console: Console) -> tuple[dict[str, Any], bool]:
    """doctor's facts and per-GPU lines (printed), and whether torch sees a CUDA GPU."""
    import torch

    from trtforge.debug.doctor import gather_facts, gpu_support

    facts = gather_facts()
    support = gpu_support(facts)
    cuda = torch.cuda.is_available()
    for row in support:
        console.print(escape(row.line), soft_wrap=True)
    if not cuda:
        console.print("[bold]No engine can run here[/]: torch sees no CUDA GPU; building, and checking the "
                      "PyTorch and ONNX Runtime routes only", soft_wrap=True)
    return {"facts": facts.as_dict(), "gpus": [{"index": s.gpu.index, "cc": s.gpu.cc, "tensorrt_rtx_runs": s.rtx,
                                                "full_tensorrt_present": s.full_installed, "line": s.line}
                                               for s in support], "cuda": cuda}, cuda


def _artifacts(paths: list[Path], routes: list[str], samples: int, repeats: int, console: Console) -> list[dict]:
    """Engines built elsewhere (``--artifact``), checked the same way, instead of building here."""
    sidecars = [read_sidecar(p) for p in paths]  # every path refused before any check runs
    return [_engine_report(s, s.precision.built or "?", routes, samples, repeats, console) for s in sidecars]


def run_selftest(route: str = "tensorrt", json_path: Path | None = None, output_dir: Path | None = None,
                 samples: int = 32, repeats: int = 20, console: Console | None = None,
                 artifacts: list[Path] | None = None) -> dict[str, Any]:
    """Doctor, Lite0 builds through the cache, ``check`` on each route, one report (see the module docstring).

    ``artifacts``: sidecars of engines built elsewhere (e.g. where this machine's TensorRT refuses to
    build) to check instead of building here.
    """
    from trtforge._version import __version__
    from trtforge.core.routes import ROUTE_NAMES
    from trtforge.zoo import efficientnet_lite0

    if route not in ROUTE_NAMES:
        raise InvalidArgument(f"--route {route}: choose one of {', '.join(ROUTE_NAMES)}")
    if samples < 1 or repeats < 1:
        raise InvalidArgument(f"--samples {samples} --repeats {repeats}: both need at least 1")
    check_json_path(json_path)
    for path in artifacts or ():
        read_sidecar(path)  # a wrong --artifact is refused before any work
    console = console or Console()
    machine, cuda = _machine(console)
    report: dict[str, Any] = {"trtforge": __version__, "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
                              "route": route, "samples": samples, "repeats": repeats, "machine": machine, "engines": []}
    routes = routes_to_run(route, cuda)
    if artifacts:
        report["engines"] = _artifacts(artifacts, routes, samples, repeats, console)
    with contextlib.ExitStack() as stack:
        folder = output_dir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="trtforge-selftest-")))
        for precision in () if artifacts else SELFTEST_PRECISIONS:
            with console.status(f"building EfficientNet-Lite0 {precision} (through the engine cache)…"):
                art, refused = _build(efficientnet_lite0(), precision, folder)
            if art is None:
                console.print(f"  {escape(refused)}", soft_wrap=True)
                report["engines"].append({"precision": precision, "build_refused": refused, "routes": []})
                continue
            sidecar = read_sidecar(Path(art.sidecar_path))
            report["engines"].append(_engine_report(sidecar, precision, routes, samples, repeats, console))
    print_table(report, console)
    if json_path is not None:
        atomic_write_bytes(json_path, (json.dumps(report, indent=2, default=str) + "\n").encode())
        console.print(f"report: {escape(str(json_path))}")
    return report


def failed(report: dict[str, Any]) -> bool:
    """True when a route that ran missed its tolerance (a route refused here is not a failure)."""
    return any(r["ran"] and not r["passed"] for e in report["engines"] for r in e["routes"])


def print_table(report: dict[str, Any], console: Console) -> None:
    table = Table(title=f"trtforge selftest: EfficientNet-Lite0, {report['samples']} photo crops vs ONNX Runtime FP32")
    for col in ("precision", "route", "result", "metric", "steady ms/batch", f"× {BASELINE}"):
        table.add_column(col)
    for engine in report["engines"]:
        for r in engine["routes"] or [{"route": "-", "ran": False, "line": engine.get("build_refused", "")}]:
            result = ("PASS" if r["passed"] else "FAIL") if r["ran"] else "not run"
            metric = f"{r['metric']} {r['worst']:.4g} (limit {r['limit']:g})" if r["ran"] else escape(r["line"])[:90]
            table.add_row(engine["precision"], r["route"], result, metric,
                          f"{r['steady_ms']:.3f}" if r["ran"] else "-",
                          f"{r['vs_baseline']:.2f}" if r.get("vs_baseline") is not None else "-")
    console.print(table)
