"""Run NVIDIA Model Optimizer's ONNX INT8 or FP8 PTQ on one model (called by bench/quant_accuracy.py).

Runs in its own environment (nvidia-modelopt[onnx] pins onnx and onnxruntime-gpu versions that
differ from trtforge's), e.g. ``/tmp/mo_venv/bin/python bench/modelopt_ptq.py in.onnx calib.npz out.onnx [int8|fp8]``.
Calibration data is an .npz whose keys are the model's input names.
"""

from __future__ import annotations

import sys

import numpy as np


def main() -> None:
    src, calib, dst = sys.argv[1:4]
    mode = sys.argv[4] if len(sys.argv) > 4 else "int8"
    from modelopt.onnx.quantization import quantize

    data = dict(np.load(calib))
    quantize(
        src, quantize_mode=mode, calibration_data=data, calibration_eps=["cpu"],
        high_precision_dtype="fp32", output_path=dst, log_level="WARNING",
    )


if __name__ == "__main__":
    main()
