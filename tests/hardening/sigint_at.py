"""Test harness: run the trtforge CLI and interrupt it with a real SIGINT at a chosen function.

Usage: ``python sigint_at.py MODULE:QUALNAME[@SIGNAL] trtforge-args...``. A profiler hook (``sys.setprofile``)
watches calls from the moment ``MODULE`` has been imported (watching the imports before it cost 0.4 CPU s a
command); when ``QUALNAME`` in ``MODULE`` is first entered the process sends itself SIGINT (or
``SIGNAL``, e.g. SIGTERM), as a user's Ctrl-C (or ``docker stop``) would arrive at that stage. Production
code is not changed; only this process is watched.

A command started in the background inherits SIGINT as ignored (``make test &``, ``nohup``), and Python then
leaves it ignored: the harness puts Python's own Ctrl-C handler back first, as an interactive shell would have
it, and SIGTERM to its default (trtforge installs its SIGTERM handler only over the default, and keeps a
SIGTERM that its parent set to be ignored as it is).
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import runpy
import signal
import sys


def main() -> None:
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    where, _, name = sys.argv[1].partition("@")
    signum = signal.Signals[name or "SIGINT"]
    module, _, qualname = where.partition(":")
    sys.argv = ["trtforge", *sys.argv[2:]]
    fired = False

    def hook(frame, event, _arg):  # noqa: ANN001, ANN202 - the profiler protocol
        nonlocal fired
        if (not fired and event == "call" and frame.f_code.co_qualname == qualname
                and frame.f_globals.get("__name__") == module):
            fired = True
            sys.setprofile(None)
            os.kill(os.getpid(), signum)

    watch_once_imported(module, hook)
    runpy.run_module("trtforge.cli", run_name="__main__", alter_sys=True)


class _WatchOnImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself; when ``module`` is imported, starts ``hook`` once the module has run, so the
    command's other imports (most of its start-up) are not watched: no call of ``module`` can come before."""

    def __init__(self, module: str, hook) -> None:  # noqa: ANN001 - the profiler protocol
        self.module, self.hook = module, hook

    def find_spec(self, name, path, target=None):  # noqa: ANN001, ANN201 - the finder protocol
        if name != self.module:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        spec.loader = _ThenWatch(spec.loader, self.hook)
        return spec


class _ThenWatch:
    """``loader``, which starts ``hook`` as the profiler once it has run the module (the rest is ``loader``'s)."""

    def __init__(self, loader, hook) -> None:  # noqa: ANN001
        self.loader, self.hook = loader, hook

    def __getattr__(self, name: str):  # noqa: ANN204 - create_module, get_source, ...: the loader's own
        return getattr(self.loader, name)

    def exec_module(self, module) -> None:  # noqa: ANN001
        self.loader.exec_module(module)
        sys.setprofile(self.hook)


def watch_once_imported(module: str, hook) -> None:  # noqa: ANN001 - the profiler protocol
    """Start ``hook`` as the profiler now if ``module`` is imported, else right after it is."""
    if module in sys.modules:
        sys.setprofile(hook)
    else:
        sys.meta_path.insert(0, _WatchOnImport(module, hook))


if __name__ == "__main__":
    main()
