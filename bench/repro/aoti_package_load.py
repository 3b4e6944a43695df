"""Does this torch build load an AOTInductor package at all? One ``nn.Linear``, plain torch calls, no trtforge.

On the lent H200 (torch 2.11.0+cu130, 2026-11-29) the load died with SIGSEGV in
``torch/export/pt2_archive/_package.py`` ``_load_aoti``, after a 49 s compile. That is why
trtforge's ``compiled`` route loads packages in a child process first
(``trtforge.runtime.aot_probe``). Run it under ``python3 -X faulthandler`` to see where it dies.

Example:
    python3 -X faulthandler bench/repro/aoti_package_load.py            # prints "loaded", or dies with the signal
    python3 bench/repro/aoti_package_load.py --device cpu
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch


class OneLinear(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x).relu()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    from torch._inductor import aoti_compile_and_package, aoti_load_package

    model = OneLinear().to(args.device).eval()
    x = torch.rand(2, 16, device=args.device)
    with tempfile.TemporaryDirectory() as folder:
        t0 = time.perf_counter()
        program = torch.export.export(model, (x,))
        package = aoti_compile_and_package(program, package_path=str(Path(folder) / "one_linear.pt2"))
        print(f"torch {torch.__version__}, {args.device}: compiled in {time.perf_counter() - t0:.1f} s", flush=True)
        runner = aoti_load_package(package)
        print("loaded", flush=True)
        error = (runner(x) - model(x)).abs().max().item()
        print(f"ran: max abs error against eager {error:.2e}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
