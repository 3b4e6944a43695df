"""Which tests must share an xdist worker (``make test`` runs ``-n 2 --dist loadgroup``).

A test goes to whichever worker is free, except:
- a module whose tests use a fixture wider than a test and narrower than the run (a module's tritonserver, the
  hardening table's outcomes, the conformance results) runs in one worker, or that fixture runs in both;
- a test marked ``pytest.mark.xdist_group(NAME)`` runs with its group (the matrix: one group per model row).

``WorkerGroups`` is the plugin tests/conftest.py registers; tests/test_suite_workers.py runs it in a small suite.
"""

from __future__ import annotations

import pytest


def shares_module_state(item: pytest.Item) -> bool:
    """Whether ``item`` uses a class-, module- or package-scoped fixture."""
    info = getattr(item, "_fixtureinfo", None)
    return info is not None and any(d.scope in ("class", "module", "package")
                                    for defs in info.name2fixturedefs.values() for d in defs)


class WorkerGroups:
    """Marks each test of a module that shares module state with the module's group."""

    @pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups on the worker
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            if item.get_closest_marker("xdist_group") is None and shares_module_state(item):
                item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
