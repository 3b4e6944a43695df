"""Does learned rounding (AdaRound, ``QuantConfig(rounding="learned")``) help trtforge's INT8 on
EfficientNet-Lite0? (issue 25, item 2)

Quantizes Lite0's FP32 graph with round-to-nearest and with learned rounding, at the default placement and
with every Conv/Gemm in INT8 (bias correction on, as by default), and compares each simulated INT8 graph
with FP32 on held-out photo crops (``bench/quant_accuracy.py``'s Lite0 suite: evaluation seed 11,
calibration seed 12). Also prints the time each method took (the report's ``methods``).

Run:
    $ python bench/learned_rounding.py --eval 256 --seconds 120
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import quant_accuracy as qa  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from trtforge.core.config import QuantConfig  # noqa: E402
from trtforge.quantize.coverage import int8_coverage, mac_counts  # noqa: E402
from trtforge.quantize.quantizer import quantize_model  # noqa: E402

PLACEMENTS = (("default placement", {}), ("every Conv/Gemm", {"include": ("Conv", "Gemm")}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--eval", type=int, default=256, help="held-out photo crops")
    parser.add_argument("--seconds", type=float, default=120.0, help="learned rounding's time budget")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="trtforge-adaround-") as work:
        suite = qa.lite0_suite(Path(work), args.eval)
        ref = qa.run(suite.fp32, suite.evaluation)
        macs = mac_counts(suite.fp32, suite.evaluation[0])
        table = Table(title=f"EfficientNet-Lite0 INT8 vs FP32, {args.eval} held-out crops (ONNX Runtime)")
        for column in ("placement", "rounding", "INT8 MACs", "top-1 agreement", "top-5 overlap", "softmax KL",
                       "learned rounding s", "total s"):
            table.add_column(column)
        for name, options in PLACEMENTS:
            for rounding in ("nearest", "learned"):
                config = QuantConfig(rounding=rounding, rounding_seconds=args.seconds, **options)
                start = time.perf_counter()
                result = quantize_model(suite.fp32, suite.calib, config, suite.preprocessing, progress=False)
                got = suite.metrics(ref, qa.run(result.sim_model, suite.evaluation))
                spent = {m["method"]: m["seconds"] for m in result.report.get("methods", [])}
                table.add_row(name, rounding, f"{int8_coverage(result.sim_model, macs, False):.1%}",
                              f"{got['top1']:.4f}", f"{got['top5_overlap']:.4f}", f"{got['softmax_kl']:.4f}",
                              f"{spent.get('learned_rounding', 0):.0f}", f"{time.perf_counter() - start:.0f}")
                Console().print(table)


if __name__ == "__main__":
    main()
