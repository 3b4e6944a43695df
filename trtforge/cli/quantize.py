"""``trtforge quantize sensitivity``: rank layers by the output error their quantized version causes.

Example:
    $ trtforge quantize sensitivity lite0_fp32.onnx --data images/ --preprocessing lite0.json --top 10
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from trtforge.cli.app import app, guarded
from trtforge.core.config import QUANTIZED_PRECISIONS, ConfigError, QuantConfig
from trtforge.core.preprocessing import read_preprocessing_json

quantize_app = typer.Typer(no_args_is_help=True, help="Quantization analysis (INT8, FP8, weight-only): sensitivity.")
app.add_typer(quantize_app, name="quantize")


@quantize_app.command("sensitivity")
@guarded
def quantize_sensitivity(
    model: Annotated[Path, typer.Argument(help="an FP32 .onnx file")],
    data: Annotated[Path, typer.Option(help="calibration images folder, .npy, or .npz per input (20 % held back)")],
    preprocessing: Annotated[Path | None, typer.Option(help="JSON with the preprocessing (or a sidecar) for images")] = None,
    calibrator: Annotated[str, typer.Option(help="mse | percentile | entropy | max")] = "mse",
    precision: Annotated[str, typer.Option(help=f"{' | '.join(QUANTIZED_PRECISIONS)}: the precision each layer "
                                                "is tried in")] = QUANTIZED_PRECISIONS[0],
    top: Annotated[int | None, typer.Option(help="show only the N most harmful")] = None,
    calib_batch_size: Annotated[int, typer.Option(help="calibration batch size (when the graph's batch is dynamic)")
                                ] = QuantConfig.batch_size,
    holdout: Annotated[float, typer.Option(help="share of samples held back, e.g. 0.2")] = QuantConfig.holdout,
) -> None:
    """Quantize one layer (or block) at a time and rank them by the output error they cause."""
    from trtforge.capture.onnx_file import load_onnx
    from trtforge.quantize.sensitivity import print_sensitivity, sensitivity_table

    if precision not in QUANTIZED_PRECISIONS:
        raise ConfigError(f"--precision {precision}: choose one of {', '.join(QUANTIZED_PRECISIONS)}")
    rows = sensitivity_table(load_onnx(model), data, QuantConfig(calibrator=calibrator, batch_size=calib_batch_size, holdout=holdout),
                             read_preprocessing_json(preprocessing), precision=precision)
    print_sensitivity(rows, top, precision)
