"""The doc tests' page runner: one ``run_page.py --serve`` process per test process runs the pages' examples and the
tutorial scripts one after the other (each page and script in its own folder, environment and namespace), so the
seconds of imports a fresh interpreter pays (torch, trtforge) are paid once per worker, not once per page."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

from run_page import PageRunner  # noqa: E402


@pytest.fixture(scope="session")
def page_runner():
    runner = PageRunner(dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(HERE)]), MPLBACKEND="Agg"))
    yield runner
    runner.close()
