"""trtforge installed the way a user installs it: `python -m build` makes a wheel and an sdist, the wheel
goes into a fresh venv that already holds the CPU torch (as docs/getting-started.md says to), and the
`trtforge` command runs there, away from the checkout: --help, doctor and the Lite0 demo."""

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


def test_wheel_installs_into_a_fresh_venv_and_runs_the_demo(dist, tmp_path, engine_store):
    [wheel] = dist.glob("*.whl")
    venv = tmp_path / "venv"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    _run([sys.executable, "-m", "venv", venv], cwd=tmp_path, env=env)
    py, pip = venv / "bin" / "python", [venv / "bin" / "python", "-m", "pip", "install", "-q", "--no-compile"]
    # The CPU torch first (a local wheel here), so the wheel's torch>=2.4 keeps it instead of a CUDA build.
    _run([*pip, "torch==2.13.0"], cwd=tmp_path, env=env)
    _run([*pip, f"{wheel}[zoo]"], cwd=tmp_path, env=env)
    where = _run([py, "-c", "import trtforge, torch; print(trtforge.__file__); print(torch.__version__)"],
                 cwd=tmp_path, env=env).stdout.splitlines()
    assert Path(where[0]).is_relative_to(venv) and not Path(where[0]).is_relative_to(ROOT)
    assert where[1].endswith("+cpu")
    trtforge_cmd = venv / "bin" / "trtforge"
    assert "build" in _run([trtforge_cmd, "--help"], cwd=tmp_path, env=env).stdout
    assert "TensorRT" in _run([trtforge_cmd, "doctor"], cwd=tmp_path, env=env).stdout
    schema = _run([py, "-c", "from trtforge.core.sidecar_schema import sidecar_schema; "
                   "print(sidecar_schema()['title'])"], cwd=tmp_path, env=env).stdout
    assert "sidecar" in schema
    # The run's engine store: tests/cli/test_demo.py asks for the same two Lite0 builds, so whichever runs first
    # builds them for real and the other gets the cache's copy (the installed wheel computes the same keys).
    demo = _run([trtforge_cmd, "demo", "--crops", "8", "-o", "demo_out"], cwd=tmp_path,
                env={**env, "TRTFORGE_CACHE_DIR": str(engine_store)}).stdout
    assert "fp16" in demo and (tmp_path / "demo_out" / "efficientnet_lite0_fp16.json").is_file()
