"""Where Triton's pieces are on this machine, and the environment its Python-backend stub needs.

Two facts shape this module:

- The stub (``triton_python_backend_stub``) embeds libpython. Started plainly it can load the
  system's older ``libpython3.X.so`` (``'_thread.RLock' object has no attribute
  '_recursion_count'``), so the server gets ``LD_LIBRARY_PATH`` = this interpreter's ``LIBDIR``.
- The stub's ``pb_utils`` was compiled against NumPy 1.x: with NumPy 2 it reads inputs wrong and
  returns empty outputs. The stub ignores ``PYTHONPATH``, so each model names a small venv (the
  *stub environment*: NumPy < 2 first, then this interpreter's site-packages) through the Python
  backend's ``EXECUTION_ENV_PATH`` parameter. The serving process itself keeps NumPy 2.

Example:
    >>> dist = find_triton()
    >>> dist.server.name
    'tritonserver'
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from trtforge.core.errors import MissingDependency

#: The stub environment's NumPy: the stub's pb_utils needs NumPy 1.x.
STUB_NUMPY = "numpy>=1.21,<2"
#: Overrides the stub environment's folder (default: ``<sys.prefix>/trtforge-serve-stub``).
STUB_ENV_VARIABLE = "TRTFORGE_SERVE_STUB_ENV"
SETUP_HINT = "run `make setup` (it installs the serve extra and the stub environment)"


@dataclass(frozen=True)
class TritonDist:
    """The Triton Inference Server files that the ``nvidia-pytriton`` wheel ships."""

    root: Path  # .../pytriton/tritonserver

    @property
    def server(self) -> Path:
        return self.root / "bin" / "tritonserver"

    @property
    def backends(self) -> Path:
        return self.root / "backends"

    @property
    def libs(self) -> Path:
        return self.root.parent.parent / "nvidia_pytriton.libs"

    def stub(self, version: str | None = None) -> Path:
        version = version or f"{sys.version_info[0]}.{sys.version_info[1]}"
        return self.root / "python_backend_stubs" / version / "triton_python_backend_stub"


def find_triton() -> TritonDist:
    """Locate the ``tritonserver`` binary of ``nvidia-pytriton`` without importing pytriton."""
    spec = importlib.util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        raise MissingDependency(f"serving needs the tritonserver binary from nvidia-pytriton; {SETUP_HINT}")
    dist = TritonDist(Path(next(iter(spec.submodule_search_locations))) / "tritonserver")
    if not dist.server.is_file() or not dist.stub().is_file():
        raise MissingDependency(
            f"nvidia-pytriton at {dist.root.parent} lacks tritonserver or the Python "
            f"{sys.version_info[0]}.{sys.version_info[1]} stub; reinstall it: {SETUP_HINT}"
        )
    return dist


def cuda_runtime_dirs() -> list[str]:
    """``nvidia/cuda_runtime/lib`` folders of the CUDA wheels torch brings (tritonserver needs libcudart)."""
    found = [Path(p) / "nvidia" / "cuda_runtime" / "lib" for p in sys.path if p]
    return [str(d) for d in dict.fromkeys(found) if d.is_dir()]


def server_environment(dist: TritonDist) -> dict[str, str]:
    """The environment for ``tritonserver``: libpython of this interpreter first, then Triton's libs."""
    env = dict(os.environ)
    paths = [sysconfig.get_config_var("LIBDIR"), str(dist.libs), *cuda_runtime_dirs(), env.get("LD_LIBRARY_PATH", "")]
    env["LD_LIBRARY_PATH"] = ":".join(p for p in paths if p)
    return env


def factory_path() -> str:
    """Where a trusted model factory's module is imported from in the stub (which ignores ``PYTHONPATH``): the
    current folder, as ``python -m`` and ``trtforge build`` import it, then this process's ``PYTHONPATH``;
    ``os.pathsep``-joined."""
    paths = [os.getcwd(), *(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)]
    return os.pathsep.join(dict.fromkeys(str(Path(p).resolve()) for p in paths))


def default_stub_env() -> Path:
    return Path(os.environ.get(STUB_ENV_VARIABLE) or Path(sys.prefix) / "trtforge-serve-stub")


def _site_paths() -> list[str]:
    """This interpreter's import path less the standard library: what the stub must see too."""
    stdlib = {sysconfig.get_path("stdlib"), sysconfig.get_path("platstdlib")}
    paths = [p for p in sys.path if p and Path(p).is_dir() and p not in stdlib
             and "lib-dynload" not in p and not p.endswith(".zip")]
    return list(dict.fromkeys(paths))


def stub_env_ready(path: Path) -> bool:
    """True when ``path`` is a venv whose own site-packages holds NumPy 1.x."""
    site = path / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    return (path / "bin" / "activate").is_file() and any(site.glob("numpy-1.*.dist-info"))


def create_stub_env(path: Path | None = None, *, pip_args: tuple[str, ...] = ()) -> Path:
    """Create (or refresh) the stub environment: a venv with NumPy < 2 that sees our site-packages.

    Example:
        >>> create_stub_env()          # what `make setup` runs
        PosixPath('.venv/trtforge-serve-stub')
    """
    path = Path(path) if path is not None else default_stub_env()
    python = path / "bin" / "python"
    if not python.is_file():
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    if not stub_env_ready(path):
        site = path / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
        subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", "install",
                        "--no-deps", "--target", str(site), STUB_NUMPY, *pip_args], check=True)
    site = path / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    (site / "zz_trtforge_parent.pth").write_text("\n".join(_site_paths()) + "\n")
    return path


def require_stub_env(path: Path | None = None) -> Path:
    """The stub environment's folder, or MissingDependency naming how to make it."""
    path = Path(path) if path is not None else default_stub_env()
    if not stub_env_ready(path):
        raise MissingDependency(
            f"no serving stub environment at {path} (a venv with NumPy < 2 for Triton's Python-backend "
            f"stub); {SETUP_HINT}, or run: python -m trtforge.serve.environment {path}"
        )
    return path


if __name__ == "__main__":
    # python -m trtforge.serve.environment [PATH [pip options, e.g. --no-index --find-links wheels/]]
    print(create_stub_env(Path(sys.argv[1]) if len(sys.argv) > 1 else None, pip_args=tuple(sys.argv[2:])))
