"""The measured points of ``tune`` in ``DIR/tune_points.json``, so a second run reuses them (no build, no timing).

A point is kept under its candidate's key and the identity of the measurement: the model (its FP32 reference
graph's sha256), the data, the device model and driver, the versions that ran, and the timing window. A point
measured on another GPU, with other data or another version is never reused. Writes are atomic.

Example:
    >>> store = PointStore(Path("tuned/"), identity)
    >>> store.get(candidate) is None
    True
    >>> store.put(point); store.save()
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any

from trtforge.core.atomic import atomic_write_bytes
from trtforge.tuning.candidates import Candidate
from trtforge.tuning.pareto import Point

log = logging.getLogger(__name__)

POINTS_FILE = "tune_points.json"
POINTS_SCHEMA = 1


def versions() -> dict[str, str | None]:
    """trtforge, torch, ONNX Runtime and TensorRT versions of this process (what a measurement depends on)."""
    import importlib.metadata

    from trtforge._version import __version__
    from trtforge.core import trt

    found: dict[str, str | None] = {"trtforge": __version__}
    for package in ("torch", "onnxruntime"):
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            found[package] = None
    if trt.available():
        info = trt.info()
        found[info.flavour] = info.version
    else:
        found["tensorrt"] = None
    return found


def identity_key(identity: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]


class PointStore:
    """The points file of one output folder: points of every identity, those of ``identity`` readable."""

    def __init__(self, folder: Path, identity: dict[str, Any]) -> None:
        self.path = Path(folder) / POINTS_FILE
        self.identity = identity
        self.key = identity_key(identity)
        self._entries: dict[str, Any] = self._read()

    def _read(self) -> dict[str, Any]:
        if not self.path.is_file():
            return {}
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError) as exc:
            log.warning("%s is unreadable (%s); tune measures every point again and rewrites it", self.path, exc)
            return {}
        if not isinstance(data, dict) or data.get("schema") != POINTS_SCHEMA or not isinstance(data.get("entries"), dict):
            log.warning("%s is not a points file of this version; tune measures every point again", self.path)
            return {}
        return data["entries"]

    def _entry_key(self, candidate: Candidate) -> str:
        return f"{self.key}:{candidate.key}"

    def get(self, candidate: Candidate) -> Point | None:
        """The point measured for ``candidate`` under this identity, or None."""
        entry = self._entries.get(self._entry_key(candidate))
        if not isinstance(entry, dict) or entry.get("identity") != self.key:
            return None
        try:
            return Point.from_record(entry["point"])
        except (KeyError, TypeError):
            return None

    def put(self, point: Point) -> None:
        self._entries[self._entry_key(point.candidate)] = {"identity": self.key, "point": point.to_record()}

    def save(self) -> Path:
        """Write every entry (this identity's and the others') atomically."""
        data = {"schema": POINTS_SCHEMA, "identities": {self.key: self.identity} | self._identities(),
                "entries": self._entries}
        atomic_write_bytes(self.path, (json.dumps(data, indent=1, sort_keys=True) + "\n").encode())
        return self.path

    def _identities(self) -> dict[str, Any]:
        if not self.path.is_file():
            return {}
        try:
            known = json.loads(self.path.read_text()).get("identities", {})
        except (OSError, ValueError, AttributeError):
            return {}
        return known if isinstance(known, dict) else {}
