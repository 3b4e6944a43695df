"""The quantizer's progress bar (rich), or a null context when progress is off.

Example:
    >>> with progress_bar(True) as bar:
    ...     task = bar.add_task("calibrating", total=4)
"""

from __future__ import annotations

import contextlib


def progress_bar(enabled: bool):
    """A rich ``Progress`` context (bars stay on screen), or ``nullcontext(None)``."""
    if not enabled:
        return contextlib.nullcontext(None)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    transient=False)
