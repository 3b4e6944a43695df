"""What ``tune`` found: every point with the Pareto front marked (a rich table, a PNG, the ``--json`` object), the
chosen point, what was skipped and why, and the ``tuned`` record written into the chosen artifact's sidecar.

Example:
    >>> console.print(report.table()); report.save_json(Path("tune.json")); report.save_plot(Path("tune.png"))
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from trtforge.core.atomic import atomic_write_bytes
from trtforge.core.device_identity import DeviceIdentity, this_device
from trtforge.tuning.candidates import Cut, Skip
from trtforge.tuning.pareto import Point, pareto_front


@dataclass(frozen=True)
class TuneReport:
    """Every point (with ``pareto``: on the front or not), the chosen one and its artifact, the skipped routes, the
    candidates the budget cut, and what the run did (builds, cache hits, points measured and reused)."""

    points: tuple[Point, ...]
    pareto: tuple[bool, ...]
    chosen: Point
    skipped: tuple[Skip, ...]
    left: tuple[Cut, ...]
    artifact: Path
    builds: int
    cache_hits: int
    measured: int
    reused: int
    elapsed_s: float
    device: DeviceIdentity
    task: str

    @classmethod
    def of(cls, points: list[Point], chosen: Point, skipped: tuple[Skip, ...], left: tuple[Cut, ...],
           artifact: Path, counters: Any, elapsed: float, device: DeviceIdentity, task: str) -> TuneReport:
        return cls(tuple(points), pareto_front(points), chosen, skipped, left, artifact, counters.builds,
                   counters.cache_hits, counters.measured, counters.reused, elapsed, device, task)

    @property
    def all_skipped(self) -> tuple[Skip, ...]:
        """The skipped routes, then each candidate the time budget cut, with why."""
        return self.skipped + tuple(Skip(c.route, f"{c.key}: {c.why}") for c in self.left)

    def as_json(self) -> dict[str, Any]:
        """``{"points": [...], "chosen": {...}, "skipped": [{"route", "why"}], ...}`` (docs/tune.md)."""
        chosen_on_front = next(f for p, f in zip(self.points, self.pareto, strict=True) if p is self.chosen) \
            if any(p is self.chosen for p in self.points) else True
        return {"points": [p.as_json(f) for p, f in zip(self.points, self.pareto, strict=True)],
                "chosen": self.chosen.as_json(chosen_on_front),
                "skipped": [{"route": s.route, "why": s.why} for s in self.all_skipped],
                "artifact": str(self.artifact), "task": self.task,
                "device": {"kind": self.device.kind, "name": self.device.name, "driver": self.device.driver},
                "run": {"builds": self.builds, "cache_hits": self.cache_hits, "measured": self.measured,
                        "reused": self.reused, "seconds": round(self.elapsed_s, 3)}}

    def save_json(self, path: Path) -> Path:
        atomic_write_bytes(Path(path), (json.dumps(self.as_json(), indent=2) + "\n").encode())
        return Path(path)

    def table(self) -> Table:
        """Every point; ``*`` marks the Pareto front, ``chosen`` the choice, ``‡`` a point the run-off timed again
        side by side (``tuning.runoff``)."""
        table = Table(title=f"tune on {escape(self.device.describe())} (accuracy: "
                            f"{'top-1 agreement' if self.task == 'classification' else 'cosine'} vs FP32)")
        for column in ("route", "precision", "batch", "opt batch", "builder", "p50 ms", "p99 ms", "items/s",
                       "accuracy", "front"):
            table.add_column(column, justify="left" if column in ("route", "precision", "builder", "front") else "right")
        for point, front in zip(self.points, self.pareto, strict=True):
            c = point.candidate
            mark = ("* chosen" if point is self.chosen else "*") if front else ("chosen" if point is self.chosen else "")
            mark = f"{mark} ‡".strip() if point.timed_with else mark
            table.add_row(c.route, c.precision, str(c.batch), "-" if c.opt_batch is None else str(c.opt_batch),
                          " ".join(f"{k}={v}" for k, v in c.builder.items()) or "-", f"{point.p50_ms:.3f}",
                          f"{point.p99_ms:.3f}", f"{point.throughput:.4g}", f"{point.accuracy:.4f}", mark)
        return table

    def save_plot(self, path: Path) -> Path:
        """p99 latency against throughput, colour = accuracy, the front ringed, the choice starred."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 4.5))
        xs = [p.p99_ms for p in self.points]
        ys = [p.throughput for p in self.points]
        dots = ax.scatter(xs, ys, c=[p.accuracy for p in self.points], cmap="viridis", s=40)
        fig.colorbar(dots, ax=ax, label="accuracy vs FP32")
        front = [p for p, f in zip(self.points, self.pareto, strict=True) if f]
        ax.scatter([p.p99_ms for p in front], [p.throughput for p in front], s=140, facecolors="none",
                   edgecolors="black", label="Pareto front")
        ax.scatter([self.chosen.p99_ms], [self.chosen.throughput], marker="*", s=260, c="red", label="chosen")
        for p in self.points:
            ax.annotate(f"{p.candidate.route} {p.candidate.precision} b{p.candidate.batch}", (p.p99_ms, p.throughput),
                        fontsize=7, xytext=(4, 3), textcoords="offset points")
        ax.set_xlabel("p99 latency, ms")
        ax.set_ylabel("throughput, items/s")
        ax.set_title(f"trtforge tune on {self.device.describe()}", fontsize=9)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(Path(path), dpi=110)
        plt.close(fig)
        return Path(path)


def tuned_record(point: Point, task: str, found_versions: dict[str, Any]) -> Any:
    """The sidecar's ``tuned`` record of ``point``, measured on this device."""
    from trtforge.core.sidecar_records import TunedRecord

    device, c = this_device(), point.candidate
    return TunedRecord(route=c.route, precision=c.precision, batch=c.batch, opt_batch=c.opt_batch,
                       builder=c.builder, device=device.name, device_kind=device.kind, driver=device.driver,
                       versions=found_versions, measured={"p50_ms": point.p50_ms, "p99_ms": point.p99_ms,
                                                          "throughput": point.throughput, "accuracy": point.accuracy,
                                                          "task": task},
                       date_utc=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))


def write_tuned_record(sidecar_path: Path, point: Point, task: str, found_versions: dict[str, Any]) -> Path:
    """Write the ``tuned`` record into the chosen artifact's sidecar (atomically), and drop it from the other
    sidecars of the folder, so one artifact there says it is the tuned one."""
    from trtforge.core.sidecar import is_trtforge_sidecar, read_sidecar, write_sidecar

    for other in sorted(Path(sidecar_path).parent.glob("*.json")):
        if other.name != Path(sidecar_path).name and is_trtforge_sidecar(other) and '"tuned"' in other.read_text():
            write_sidecar(other, replace(read_sidecar(other), tuned=None))
    sidecar = read_sidecar(sidecar_path)
    return write_sidecar(sidecar_path, replace(sidecar, tuned=tuned_record(point, task, found_versions)))
