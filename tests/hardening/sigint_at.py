"""Test harness: run the trtforge CLI and interrupt it with a real SIGINT at a chosen function.

Usage: ``python sigint_at.py MODULE:QUALNAME[@SIGNAL] trtforge-args...``. A profiler hook (``sys.setprofile``)
watches calls; when ``QUALNAME`` in ``MODULE`` is first entered the process sends itself SIGINT (or
``SIGNAL``, e.g. SIGTERM), as a user's Ctrl-C (or ``docker stop``) would arrive at that stage. Production
code is not changed; only this process is watched.

A command started in the background inherits SIGINT as ignored (``make test &``, ``nohup``), and Python then
leaves it ignored: the harness puts Python's own Ctrl-C handler back first, as an interactive shell would have
it, and SIGTERM to its default (trtforge installs its SIGTERM handler only over the default, and keeps a
SIGTERM that its parent set to be ignored as it is).
"""

from __future__ import annotations

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

    sys.setprofile(hook)
    runpy.run_module("trtforge.cli", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
