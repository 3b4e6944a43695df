"""A rich progress display driven by TensorRT's ``IProgressMonitor``; Ctrl-C cancels cleanly.

Example:
    >>> with BuildProgress(enabled=True) as monitor:
    ...     config.progress_monitor = monitor.trt_monitor()
    ...     plan = builder.build_serialized_network(network, config)
    >>> monitor.cancelled
    False
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn

from trtforge.core import trt


class BuildProgress:
    """Context manager: shows TensorRT's build phases; SIGINT asks TensorRT to stop at the next step."""

    def __init__(self, enabled: bool = True, console: Console | None = None, title: str = "build") -> None:
        self.enabled = enabled
        self.cancelled = False
        self.signum = signal.SIGINT  # the signal that cancelled the build (SIGINT or SIGTERM)
        self.title = title
        self._progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
            TimeElapsedColumn(), console=console or Console(stderr=True), transient=True,
            disable=not enabled,
        )
        self._tasks: dict[str, TaskID] = {}
        self._previous_handlers: dict[int, Any] = {}
        self._trt_monitor = None

    # -- context -----------------------------------------------------------------------------
    def __enter__(self) -> BuildProgress:
        self._progress.__enter__()
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):  # SIGTERM: the same clean stop as Ctrl-C
                if signal.getsignal(signum) is not signal.SIG_IGN:
                    self._previous_handlers[signum] = signal.signal(signum, self._on_sigint)
        return self

    def __exit__(self, *exc) -> None:
        for signum, handler in self._previous_handlers.items():
            signal.signal(signum, handler)
        self._previous_handlers.clear()
        self._progress.__exit__(*exc)

    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        self.cancelled, self.signum = True, signum

    # -- TensorRT callbacks ------------------------------------------------------------------
    def phase_start(self, phase_name: str, parent_phase: str | None, num_steps: int) -> None:
        depth = 0
        parent = parent_phase
        while parent is not None and parent in self._tasks and depth < 4:
            depth += 1
            parent = None
        label = ("  " * depth) + f"{self.title}: {phase_name}"
        self._tasks[phase_name] = self._progress.add_task(label, total=max(num_steps, 1))

    def step_complete(self, phase_name: str, step: int) -> bool:
        task = self._tasks.get(phase_name)
        if task is not None:
            self._progress.update(task, completed=step + 1)
        return not self.cancelled

    def phase_finish(self, phase_name: str) -> None:
        task = self._tasks.pop(phase_name, None)
        if task is not None:
            self._progress.remove_task(task)

    def trt_monitor(self):
        """An ``IProgressMonitor`` subclass instance that forwards to this object.

        The instance is kept on ``self``: TensorRT holds only a raw pointer, so a monitor that Python
        collects mid-build would crash the process.
        """
        if self._trt_monitor is not None:
            return self._trt_monitor
        mod = trt.bindings()
        owner = self

        class _Monitor(mod.IProgressMonitor):
            def __init__(self) -> None:
                mod.IProgressMonitor.__init__(self)

            def phase_start(self, phase_name, parent_phase, num_steps):
                owner.phase_start(phase_name, parent_phase, num_steps)

            def step_complete(self, phase_name, step):
                return owner.step_complete(phase_name, step)

            def phase_finish(self, phase_name):
                owner.phase_finish(phase_name)

        self._trt_monitor = _Monitor()
        return self._trt_monitor


@contextlib.contextmanager
def stage_progress(description: str, *, enabled: bool = True, console: Console | None = None) -> Iterator[None]:
    """A spinner with the elapsed time for a stage that reports no steps (a long ONNX export), gone after.

    Example:
        >>> with stage_progress("exporting Net to ONNX (torch.onnx, dynamo)"):
        ...     export_onnx(model, args, path)
    """
    progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                        console=console or Console(file=sys.stderr), transient=True, disable=not enabled)
    with progress:
        progress.add_task(description, total=None)
        yield


#: Work that ends within this many seconds shows no progress line (a check of a small model prints only its result).
PROGRESS_DELAY_S = 1.0


class StepProgress:
    """Counted steps, one bar per stage, on stderr; drawn once the work has run ``delay`` seconds, gone after.

    Example:
        >>> with StepProgress("check lite0") as steps:
        ...     step = steps.stage("FP32 reference (ONNX Runtime)", total=len(batches))
        ...     for batch in batches:
        ...         run(batch)
        ...         step()
    """

    def __init__(self, title: str, *, enabled: bool = True, console: Console | None = None,
                 delay: float = PROGRESS_DELAY_S) -> None:
        self.title = title
        self._progress = Progress(
            SpinnerColumn(), TextColumn("[bold]{task.description}"), BarColumn(),
            TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
            console=console or Console(file=sys.stderr), transient=True, disable=not enabled)
        self._delay = delay
        self._timer = threading.Timer(delay, self._progress.start) if enabled and delay > 0 else None

    def __enter__(self) -> StepProgress:
        if self._timer is not None:
            self._timer.daemon = True
            self._timer.start()
        else:
            self._progress.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer.join()
        self._progress.stop()

    def stage(self, description: str, total: int) -> Callable[[], None]:
        """A new bar ``TITLE: description`` of ``total`` steps; call what it returns after each step."""
        task = self._progress.add_task(f"{self.title}: {description}", total=max(total, 1))
        return lambda: self._progress.advance(task)
