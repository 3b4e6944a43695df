"""Four processes compile the same model into one cache at once: one build, four identical engines."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.needs_trt

WORKER = Path(__file__).resolve().parents[1] / "doubles" / "tiny_model.py"


@pytest.mark.slow
def test_four_processes_one_build_identical_engines(tmp_path):
    start_at = time.time() + 8.0  # after every worker has imported torch and trtforge
    procs = [
        subprocess.Popen([sys.executable, str(WORKER), str(tmp_path / "cache"), str(tmp_path / f"out{i}"),
                          str(start_at)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for i in range(4)
    ]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err[-2000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert time.time() > start_at
    built = [r for r in results if not r["cache"]["hit"]]
    assert len(built) == 1, results
    assert len({r["cache"]["key"] for r in results}) == 1
    assert len({r["sha256"] for r in results}) == 1
    engines = [(tmp_path / f"out{i}" / "tiny_net_fp16.engine").read_bytes() for i in range(4)]
    assert all(e == engines[0] for e in engines)
    assert len(list((tmp_path / "cache" / "entries").glob("*.json"))) == 1
