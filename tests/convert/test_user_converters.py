"""A converter the user registers from their own module (issue 23): ``compile(path="direct")`` and
``trtforge coverage`` use it, it changes the engine-cache key, and a clash with a built-in converter is one
line unless ``replace=True``.

``user_model/user_ops.py`` holds a ``torch.library`` op trtforge has no converter for, and registers its
converter when ``WITH_CONVERTER=1``. Everything runs in child processes: the registry is process-wide,
and the converter table other tests read must stay the built-in one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
USER = Path(__file__).resolve().parent / "user_model"

pytestmark = pytest.mark.needs_trt


def _run(argv: list[str], with_converter: bool, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(USER)]), COLUMNS="160",
               WITH_CONVERTER="1" if with_converter else "0")
    return subprocess.run([sys.executable, *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=600,
                          check=False)


def _row(out: str, op: str) -> str:
    return next((line for line in out.splitlines() if op in line), "")


#: ``trtforge ARGV`` for each ARGV of ``sys.argv[1]`` (JSON), in one child process (``cli_in_process``, as the console
#: script runs), printed as one JSON line ``[[exit status, stdout, stderr], ...]``.
COMMANDS = f"""
import json, sys
sys.path.insert(0, {str(ROOT / "tests" / "support")!r})
from cli_in_process import run
done = [run(argv) for argv in json.loads(sys.argv[1])]
print(json.dumps([[d.returncode, d.stdout, d.stderr] for d in done]))
"""


@pytest.fixture(scope="module")
def without_converter(tmp_path_factory) -> dict[str, subprocess.CompletedProcess]:
    """``coverage`` and ``build --path direct`` of the user's model without its converter, one child process for
    both (a child pays seconds of imports): {"coverage": ..., "build": ...}."""
    work = tmp_path_factory.mktemp("no_converter")
    argvs = {"coverage": ["coverage", "user_ops:make", "--input-shape", "2x8"],
             "build": ["build", "user_ops:make", "--path", "direct", "--input-shape", "2x8", "-o", "out"]}
    proc = _run(["-c", COMMANDS, json.dumps(list(argvs.values()))], False, work)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    return {name: subprocess.CompletedProcess(argv, *result) for (name, argv), result in zip(argvs.items(), results, strict=True)}


@pytest.mark.slow
def test_coverage_lists_the_user_converter(without_converter, with_converter):
    without = without_converter["coverage"]
    with_it = subprocess.CompletedProcess("coverage", *with_converter["coverage"])
    assert without.returncode == with_it.returncode == 0, without.stderr + with_it.stderr
    assert "unsupported" in _row(without.stdout, "userlib.scale2.default"), without.stdout
    assert "converted" in _row(with_it.stdout, "userlib.scale2.default"), with_it.stdout
    assert "coverage 100.0%; 1 engine partition(s)" in with_it.stdout


#: The user's converter registered (``WITH_CONVERTER=1``), in one child process: compile through it, ``trtforge coverage``
#: (in process, as the console script runs), then a clash and a replacement; one JSON line.
SCRIPT = r"""
import json, sys, torch, trtforge
sys.path.insert(0, sys.argv[1])
from cli_in_process import run
from trtforge.convert import converter, source_hash
assert trtforge.converter is converter and "converter" in trtforge.__all__  # the front door's name (issue 36)
from trtforge.convert.api import lower_module
from trtforge.convert.evaluator import evaluate
from trtforge.core.errors import InvalidArgument
before = source_hash()
import user_ops
after = source_hash()
model, x = user_ops.make(), torch.randn(3, 8, generator=torch.Generator().manual_seed(1))
(out,) = evaluate(lower_module(model, (x,)).net.record, {"x": x})
art = trtforge.compile(model, (torch.zeros(2, 8),), path="direct", batch="1:2:4", output_dir="out", cache_dir="cache",
                       progress=False)
cov = run(["coverage", "user_ops:make", "--input-shape", "2x8"], env={"COLUMNS": "160"})
try:
    converter("aten.relu.default")(lambda ctx, node, args: None)
    clash = None
except InvalidArgument as exc:
    clash = str(exc)
converter("userlib.scale2.default", replace=True)(lambda ctx, node, args: ctx.tensor(args[0]))
json.dump({"before": before, "after": after, "replaced": source_hash(), "sidecar": art.sidecar.builder.converter_hash,
           "max_error": float((out - model(x)).abs().max()), "clash": clash,
           "coverage": [cov.returncode, cov.stdout, cov.stderr]}, sys.stdout)
"""


@pytest.fixture(scope="module")
def with_converter(tmp_path_factory) -> dict:
    """SCRIPT's JSON (one child process: a child pays seconds of imports)."""
    proc = _run(["-c", SCRIPT, str(ROOT / "tests" / "support")], True, tmp_path_factory.mktemp("with_converter"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_compile_direct_uses_the_user_converter_and_keys_on_its_source(with_converter):
    got = with_converter
    assert got["max_error"] < 1e-5  # the lowered network (the user's converter in it) equals PyTorch
    assert got["before"] != got["after"] == got["sidecar"]  # registering changed the key the engine was cached under
    assert got["replaced"] not in (got["before"], got["after"])  # so does replacing a converter
    assert got["clash"].startswith("aten.relu.default already has a converter") and "replace=True" in got["clash"]


@pytest.mark.slow
def test_without_the_converter_the_direct_path_refuses_in_one_line(without_converter):
    proc = without_converter["build"]
    assert proc.returncode == 2 and "userlib.scale2.default" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


@pytest.mark.slow
def test_validators_see_the_settings():
    """Validators take ``(node, settings)`` (or ``(node)``): a BF16 transposed convolution is refused by its
    validator, so ``coverage`` at bf16 says so before anything is built, and at fp32 converts it."""
    import torch

    from trtforge.convert.coverage import coverage
    from trtforge.convert.registry import Converter, Settings

    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.ConvTranspose2d(8, 4, 2, 2)).eval()
    x = (torch.zeros(2, 3, 8, 8),)
    at_fp32, at_bf16 = coverage(model, x, precision="fp32"), coverage(model, x, precision="bf16")
    assert "aten.convolution.default" in at_fp32.converted and not at_fp32.refused
    (reason,) = [r for op, r in at_bf16.refused.items() if op.startswith("aten.convolution.default")]
    assert "BF16 transposed convolution" in reason and at_bf16.converted["aten.convolution.default"] == 1
    both = Converter("t", lambda ctx, node, args: None, lambda node, settings: f"at {settings.compute}", "user")
    old_style = Converter("t", lambda ctx, node, args: None, lambda node: "any precision", "user")
    assert both.refusal(None, Settings(torch.float16)) == "at torch.float16"
    assert old_style.refusal(None, Settings(torch.float16)) == "any precision"
