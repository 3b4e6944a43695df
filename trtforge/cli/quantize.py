"""``trtforge quantize sensitivity``: rank layers by the output error their INT8 version causes.

Example:
    $ trtforge quantize sensitivity lite0_fp32.onnx --data images/ --preprocessing lite0.json --top 10
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from trtforge.cli.app import app, guarded
from trtforge.core.config import QuantConfig, read_preprocessing_json

quantize_app = typer.Typer(no_args_is_help=True, help="INT8 analysis: sensitivity.")
app.add_typer(quantize_app, name="quantize")


@quantize_app.command("sensitivity")
@guarded
def quantize_sensitivity(
    model: Annotated[Path, typer.Argument(help="an FP32 .onnx file")],
    data: Annotated[Path, typer.Option(help="calibration images folder, .npy, or .npz per input (20 % held back)")],
    preprocessing: Annotated[Path | None, typer.Option(help="JSON with the preprocessing (or a sidecar) for images")] = None,
    calibrator: Annotated[str, typer.Option(help="mse | percentile | entropy | max")] = "mse",
    top: Annotated[int | None, typer.Option(help="show only the N most harmful")] = None,
) -> None:
    """Quantize one layer (or block) at a time and rank them by the output error they cause."""
    import onnx

    from trtforge.quantize.sensitivity import print_sensitivity, sensitivity_table

    rows = sensitivity_table(onnx.load(str(model)), data, QuantConfig(calibrator=calibrator),
                             read_preprocessing_json(preprocessing))
    print_sensitivity(rows, top)
