"""Does cross-layer equalization help trtforge's INT8 on EfficientNet-Lite0? (issue 25, item 1)

Quantizes Lite0's FP32 graph as it is, after weight-range equalization (``equalize``, Nagel et al. 2019)
and after activation-range equalization of the depthwise pairs (``equalize_activations``), at the default
placement and with every Conv/Gemm in INT8, and compares each simulated INT8 graph with FP32 on held-out
photo crops (``bench/quant_accuracy.py``'s Lite0 suite: evaluation seed 11, calibration seed 12).

Run:
    $ python bench/equalization.py --eval 256       # about 10 minutes on 2 idle cores
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

import quant_accuracy as qa  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from trtforge.core.config import QuantConfig  # noqa: E402
from trtforge.passes.graph import to_proto  # noqa: E402
from trtforge.quantize.coverage import int8_coverage, mac_counts  # noqa: E402
from trtforge.quantize.methods.equalize import equalize, equalize_activations  # noqa: E402
from trtforge.quantize.quantizer import quantize_model  # noqa: E402

CONFIGS = (("default placement", QuantConfig()), ("every Conv/Gemm", QuantConfig(include=("Conv", "Gemm"))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--eval", type=int, default=256, help="held-out photo crops")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="trtforge-cle-") as work:
        suite = qa.lite0_suite(Path(work), args.eval)
        ref = qa.run(suite.fp32, suite.evaluation)
        macs = mac_counts(suite.fp32, suite.evaluation[0])
        calib = [{"images": np.concatenate([f["images"] for f in suite.calib[i:i + 8]])}
                 for i in range(0, len(suite.calib), 8)]
        graphs = {"as exported": suite.fp32, "weight-range CLE": to_proto(equalize(suite.fp32)[0]),
                  "activation equalization (depthwise pairs)": to_proto(equalize_activations(suite.fp32, calib)[0])}
        table = Table(title=f"EfficientNet-Lite0 INT8 vs FP32, {args.eval} held-out crops (ONNX Runtime)")
        for column in ("graph", "placement", "INT8 MACs", "top-1 agreement", "top-5 overlap", "softmax KL", "s"):
            table.add_column(column)
        for name, config in CONFIGS:
            for label, graph in graphs.items():
                start = time.perf_counter()
                result = quantize_model(graph, suite.calib, config, suite.preprocessing, progress=False)
                got = suite.metrics(ref, qa.run(result.sim_model, suite.evaluation))
                table.add_row(label, name, f"{int8_coverage(result.sim_model, macs, False):.1%}", f"{got['top1']:.4f}",
                              f"{got['top5_overlap']:.4f}", f"{got['softmax_kl']:.4f}",
                              f"{time.perf_counter() - start:.0f}")
        Console().print(table)


if __name__ == "__main__":
    main()
