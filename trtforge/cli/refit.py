"""``trtforge refit``: new weights into a refittable engine, in place and atomically.

Example:
    $ trtforge refit out/lite0_fp16_refittable.engine --weights finetuned.pt
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from trtforge.cli.app import app, console, guarded


@app.command()
@guarded
def refit(
    engine: Annotated[Path, typer.Argument(help="a refittable .engine (or its .json)")],
    weights: Annotated[Path, typer.Option(help="new weights: a .onnx, or a state_dict .pt")],
) -> None:
    """Refit new weights into an engine in place (atomically); its sidecar gets the new sha256."""
    from trtforge.refit import refit_engine

    report = refit_engine(engine, weights)
    console.print(f"[green]refitted[/] {report.engine} with {report.weights} weights from {report.source}; "
                  f"sha256 {report.old_sha256[:12]}… → {report.new_sha256[:12]}…")
