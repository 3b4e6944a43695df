"""Calibration cache: activation thresholds as JSON, keyed by graph hash, data hash and settings.

An entry is reused only when all three match; a corrupt entry is ignored (and rewritten).

Example:
    >>> cache = CalibrationCache(Path("trtforge_out/calib_cache"))
    >>> cache.load(graph_sha, data_sha, {"calibrator": "entropy"})   # None on a miss
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import onnx

from trtforge._version import __version__
from trtforge.core.atomic import atomic_write_bytes

FORMAT = 1


class CalibrationCache:
    """A folder of ``<key>.json`` files, one per (graph, data, calibrator settings)."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)

    @staticmethod
    def graph_hash(model: onnx.ModelProto) -> str:
        return hashlib.sha256(model.SerializeToString(deterministic=True)).hexdigest()

    @staticmethod
    def key(graph_sha: str, data_sha: str, settings: dict[str, Any]) -> str:
        text = json.dumps({"graph": graph_sha, "data": data_sha, "settings": settings, "format": FORMAT},
                          sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def path(self, graph_sha: str, data_sha: str, settings: dict[str, Any]) -> Path:
        return self.directory / f"calib_{self.key(graph_sha, data_sha, settings)}.json"

    def load(self, graph_sha: str, data_sha: str, settings: dict[str, Any]):
        """(amax, shapes) when a matching, intact entry exists; else None."""
        path = self.path(graph_sha, data_sha, settings)
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        if (data.get("graph_sha256"), data.get("data_sha256"), data.get("settings")) != (graph_sha, data_sha, settings):
            return None
        try:
            amax = {str(k): float(v) for k, v in data["amax"].items()}
            shapes = {str(k): tuple(int(d) for d in v) for k, v in data["shapes"].items()}
        except (KeyError, TypeError, ValueError):
            return None
        return amax, shapes

    def save(self, graph_sha: str, data_sha: str, settings: dict[str, Any], amax: dict[str, float],
             shapes: dict[str, tuple[int, ...]]) -> Path:
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.path(graph_sha, data_sha, settings)
        body = {"format": FORMAT, "trtforge_version": __version__, "graph_sha256": graph_sha, "data_sha256": data_sha,
                "settings": settings, "amax": amax, "scales": {k: v / 127.0 for k, v in amax.items()},
                "shapes": {k: list(v) for k, v in shapes.items()}}
        atomic_write_bytes(path, (json.dumps(body, indent=1, sort_keys=True) + "\n").encode())
        return path
