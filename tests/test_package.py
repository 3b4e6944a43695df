"""trtforge installed the way a user installs it: `python -m build` makes a wheel and an sdist, and pip installs
the wheel with its ``zoo`` extra into a fresh venv, where the `trtforge` command runs away from the checkout:
--help, doctor and the Lite0 demo.

What is installed and what is borrowed: pip resolves and installs the wheel and every requirement of it and of
its extra (NumPy, ONNX, ONNX Runtime, the TensorRT-RTX wheels, torch's own requirements: sympy, networkx, ...)
from this machine's package index into the venv. torch alone is borrowed: the venv sees the checkout's CPU torch
(2.13.0+cpu, the one docs/getting-started.md says to install first) through a ``.pth`` file naming a folder that
holds links to torch's packages and its dist-info, nothing else, so pip finds ``torch>=2.4`` met and keeps it, as
it keeps the CPU torch a user installed first; the test asserts that torch is the borrowed one. The venv has no
pip of its own: this environment's pip installs into it (``pip --python``), as the Makefile's yolo venv does.
(Installing the 700 MB torch wheel again cost 7.6 CPU s, and `import torch` from it 3.5 CPU s in each command
against 1.4 from the checkout's byte-compiled copy; the venv's own pip another 3.5 s; none of it checks trtforge.)
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Package data the wheel (and the sdist) must carry; the stub environment's requirement (NumPy < 2) is
#: ``STUB_NUMPY`` in trtforge/serve/environment.py.
PACKAGE_DATA = ("trtforge/core/sidecar.schema.json", "trtforge/serve/environment.py", "trtforge/cli/reference.py")

pytestmark = pytest.mark.slow


def _run(args: list, cwd: Path, timeout: float = 1200, env: dict | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    assert done.returncode == 0, f"{args} exited {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    return done


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    """The wheel and sdist of this checkout (the sdist first, then the wheel built from it)."""
    out = tmp_path_factory.mktemp("dist")
    # --no-isolation: the build backend (setuptools) of this environment, no download.
    _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", out, ROOT], cwd=ROOT)
    return out


def test_wheel_and_sdist_carry_the_package_data(dist):
    import trtforge

    [wheel], [sdist] = dist.glob("*.whl"), dist.glob("*.tar.gz")
    assert wheel.name == f"trtforge-{trtforge.__version__}-py3-none-any.whl"
    names = set(zipfile.ZipFile(wheel).namelist())
    assert set(PACKAGE_DATA) <= names
    entry = zipfile.ZipFile(wheel).read(f"trtforge-{trtforge.__version__}.dist-info/entry_points.txt").decode()
    assert "trtforge = trtforge.cli:main" in entry
    with tarfile.open(sdist) as tar:
        members = {m.name.split("/", 1)[1] for m in tar.getmembers() if "/" in m.name}
    assert set(PACKAGE_DATA) <= members and "pyproject.toml" in members


def borrowed_torch(folder: Path) -> Path:
    """``folder`` holding links to this environment's torch: its top-level packages and its dist-info, no more."""
    import importlib.metadata

    torch_dist = importlib.metadata.distribution("torch")
    site = Path(torch_dist.locate_file(""))
    info = next(f for f in torch_dist.files if f.name == "METADATA").parent  # torch-2.13.0+cpu.dist-info
    folder.mkdir()
    for name in [*torch_dist.read_text("top_level.txt").split(), info.name]:
        (folder / name).symlink_to(site / name)
    return folder


def test_wheel_installs_into_a_fresh_venv_and_runs_the_demo(dist, tmp_path, engine_store):
    [wheel] = dist.glob("*.whl")
    venv = tmp_path / "venv"
    # A user's shell: no PYTHONDONTWRITEBYTECODE either, so the venv's first command writes the bytecode the next
    # ones read (with it set, each of the four commands below compiled every module it imported anew).
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "PYTHONDONTWRITEBYTECODE")}
    _run([sys.executable, "-m", "venv", "--without-pip", venv], cwd=tmp_path, env=env)
    py = venv / "bin" / "python"
    purelib = _run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=tmp_path,
                   env=env).stdout.strip()
    borrowed = borrowed_torch(tmp_path / "borrowed-torch")
    (Path(purelib) / "borrowed-torch.pth").write_text(f"{borrowed}\n")
    # The wheel and its extra, resolved by pip; torch>=2.4 is met by the borrowed CPU torch, which pip keeps.
    _run([sys.executable, "-m", "pip", "--python", py, "install", "-q", "--no-compile", f"{wheel}[zoo]"],
         cwd=tmp_path, env=env)
    where = _run([py, "-c", "import trtforge, torch; print(trtforge.__file__); print(torch.__file__); "
                  "print(torch.__version__); from trtforge.core.sidecar_schema import sidecar_schema; "
                  "print(sidecar_schema()['title'])"], cwd=tmp_path, env=env).stdout.splitlines()
    assert Path(where[0]).is_relative_to(venv) and not Path(where[0]).is_relative_to(ROOT)
    assert Path(where[1]).is_relative_to(borrowed)  # pip kept the CPU torch and installed no other
    assert where[2].endswith("+cpu")
    assert "sidecar" in where[3]
    trtforge_cmd = venv / "bin" / "trtforge"
    assert "build" in _run([trtforge_cmd, "--help"], cwd=tmp_path, env=env).stdout
    assert "TensorRT" in _run([trtforge_cmd, "doctor"], cwd=tmp_path, env=env).stdout
    # The run's engine store: tests/cli/test_demo.py asks for the same two Lite0 builds, so whichever runs first
    # builds them for real and the other gets the cache's copy (the installed wheel computes the same keys).
    demo = _run([trtforge_cmd, "demo", "--crops", "8", "-o", "demo_out"], cwd=tmp_path,
                env={**env, "TRTFORGE_CACHE_DIR": str(engine_store)}).stdout
    assert "fp16" in demo and (tmp_path / "demo_out" / "efficientnet_lite0_fp16.json").is_file()
