"""Load an AOTInductor package in a child process first, so a loader that crashes takes down the child and not the caller.

A ``.pt2`` holds a compiled shared library, and loading it runs native code. On the lent H200
(torch 2.11.0+cu130), ``aoti_load_package`` died with SIGSEGV inside the loader's constructor.
That happened for our EfficientNet-Lite0 package, and also for a one-layer ``nn.Linear``
compiled with plain torch calls in the same process (docs/benchmark-history.md,
AOTInductor). A serving process must not die that way. The ``compiled`` route therefore loads each
package in a child process once (``python -m trtforge.runtime.aot_probe PACKAGE DEVICE``).
Only if the child loads it cleanly does the route load it in the caller. Otherwise
``AotPackageError`` names the package, the signal or error, the torch build, and the ways out.
A package that passed is not probed again in the same process; the cache key includes its size
and mtime.

Example:
    >>> check_aot_package("out/lite0_aot_cuda.pt2", torch.device("cuda"))   # None, or AotPackageError
"""

from __future__ import annotations

import functools
import signal
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from trtforge.core.errors import Unsupported

try:
    import resource
except ImportError:  # not on Windows
    resource = None

#: Seconds a child may take to import torch and load the package.
PROBE_TIMEOUT_S = 300.0


class AotPackageError(Unsupported):
    """An AOTInductor package that cannot be loaded safely in this process."""


@dataclass(frozen=True)
class ProbeResult:
    """How the child process ended: ``returncode`` < 0 means killed by that signal."""

    returncode: int
    stderr_tail: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def describe(self) -> str:
        """``killed by SIGSEGV``, ``exited with status 1``, or ``loaded``.

        Example:
            >>> ProbeResult(-11, "").describe()
            'killed by SIGSEGV'
        """
        if self.returncode == 0:
            return "loaded"
        if self.returncode < 0:
            try:
                return f"killed by {signal.Signals(-self.returncode).name}"
            except ValueError:
                return f"killed by signal {-self.returncode}"
        return f"exited with status {self.returncode}"


def probe_command(path: Path, device: torch.device) -> list[str]:
    """The child's command line: this interpreter, this module, the package and the device."""
    return [sys.executable, "-m", "trtforge.runtime.aot_probe", str(path), str(device)]


def run_probe(command: Sequence[str], timeout: float = PROBE_TIMEOUT_S) -> ProbeResult:
    """Run ``command`` and report how it ended (a timeout counts as a failure)."""
    try:
        done = subprocess.run(list(command), capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        tail = (exc.stderr or b"")[-2000:]
        tail = tail.decode(errors="replace") if isinstance(tail, bytes) else tail
        return ProbeResult(returncode=-int(signal.SIGKILL), stderr_tail=f"timed out after {timeout:.0f} s\n{tail}")
    return ProbeResult(returncode=done.returncode, stderr_tail=done.stderr[-2000:])


@functools.cache
def _probed(path: str, size: int, mtime_ns: int, device: str) -> ProbeResult:
    return run_probe(probe_command(Path(path), torch.device(device)))


def check_aot_package(path: str | Path, device: torch.device) -> None:
    """Load ``path`` in a child process; raise ``AotPackageError`` if that child failed or died."""
    path = Path(path).resolve()
    stat = path.stat()
    result = _probed(str(path), stat.st_size, stat.st_mtime_ns, str(device))
    if result.ok:
        return
    last = [line for line in result.stderr_tail.splitlines() if line.strip()][-3:]
    raise AotPackageError(
        f"AOTInductor package {path} is not safe to load here: loading it in a child process "
        f"{result.describe()} (torch {torch.__version__}, {device}). Loading it in this process could "
        "crash it the same way. Re-export the package with this torch build "
        "(trtforge.runtime.load.export_aot_beside), or run the model without the package: "
        "trtforge.load(path, route='compiled', aot_package=False) compiles it with torch.compile, "
        "and route='cuda_graph' needs no compiler."
        + (f" Child's last lines: {' | '.join(last)}" if last else "")
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Child side: load the package on the device, exit 0 if that worked."""
    path, device = (argv if argv is not None else sys.argv[1:])[:2]
    if resource is not None:  # a crash here should not spend time writing a core file
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    from torch._inductor import aoti_load_package

    target = torch.device(device)
    if target.type == "cuda":
        torch.cuda.set_device(target)
    aoti_load_package(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
