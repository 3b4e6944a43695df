"""What the installed TensorRT refuses, per op signature: a JSON table per flavour, version and dtype.

Probing an op costs a small build (tens of milliseconds); its answer holds until TensorRT changes,
so it is kept under the cache folder: ``op_support/<flavour>-<version>-<dtype>.json`` maps an op
signature (``passes.op_probe.op_signature``) to TensorRT's reason, or null when the op builds.

Example:
    >>> table = OpSupport(EngineCache().directory, "tensorrt_rtx", "1.2.0", "bfloat16")
    >>> table.get("HardSwish||FLOAT:4")
    'UNSUPPORTED_NODE: ...'
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from trtforge.core.atomic import atomic_write_bytes

log = logging.getLogger(__name__)

#: A signature the table has not seen (``None`` means "builds").
UNKNOWN = object()


class OpSupport:
    """One flavour/version/dtype's table; ``directory`` None keeps it in memory only."""

    def __init__(self, directory: Path | None, flavour: str, version: str, dtype: str) -> None:
        self.path = None if directory is None else Path(directory) / "op_support" / f"{flavour}-{version}-{dtype}.json"
        self.table: dict[str, str | None] = {}
        if self.path is not None and self.path.is_file():
            try:
                self.table = dict(json.loads(self.path.read_text()))
            except (ValueError, TypeError, OSError) as exc:
                log.warning("op support table %s is unreadable (%s); probing again", self.path, exc)

    def get(self, signature: str) -> object:
        return self.table.get(signature, UNKNOWN)

    def put(self, answers: dict[str, str | None]) -> None:
        """Add answers and store the table (a store that fails only warns: probing again is cheap)."""
        self.table.update(answers)
        if self.path is None or not answers:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(self.path, json.dumps(self.table, indent=0, sort_keys=True).encode())
        except OSError as exc:
            log.warning("op support table %s not stored (%s)", self.path, exc)
