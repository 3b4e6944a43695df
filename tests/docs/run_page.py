"""Run one page's examples in order in the current folder: ``python run_page.py EXAMPLES.json``.

Python examples share one namespace (``runpy.run_path`` with the previous globals); shell examples run
with ``bash -e``. A ``console`` fence's plain ``trtforge ARGS`` lines run in this process through the console
script's entry point (``tests/support/cli_in_process.py``: a CLI process would pay seconds of imports for each),
its other lines with ``bash``; each must exit as the page says (0, or the ``# ... exit N`` it is marked with)
and print the ``error:`` line shown under it. The first failure prints ``doc example failed: PAGE:LINE`` and
exits 1.
"""

from __future__ import annotations

import json
import os
import runpy
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))


def main(path: str) -> int:
    namespace: dict = {"__name__": "__doc_example__"}
    with tempfile.TemporaryDirectory(prefix="doc-example-") as scripts:
        for index, example in enumerate(json.loads(Path(path).read_text())):
            print(f"--- {example['id']} ({example['kind']})", flush=True)
            if example["kind"] in ("python", "setup"):
                script = Path(scripts) / f"example_{index}.py"
                script.write_text(example["code"])
                try:
                    namespace = runpy.run_path(str(script), init_globals=namespace, run_name="__doc_example__")
                except BaseException as exc:  # noqa: BLE001 - SystemExit too: the example failed; say which
                    import traceback

                    traceback.print_exc()
                    print(f"doc example failed: {example['id']}: {type(exc).__name__}: {exc}", flush=True)
                    return 1
            else:
                for code in example.get("steps") or [{"bash": example["code"]}]:
                    problem = run_step(code)
                    if problem:
                        print(f"doc example failed: {example['id']}: {problem}", flush=True)
                        return 1
    return 0


def run_step(step: dict) -> str | None:
    """Run one shell step (``{"bash": CODE}``) or one ``trtforge`` command in process (``{"argv", "exit",
    "text"}``); what went wrong, or None."""
    if "bash" in step:
        proc = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", step["bash"]], check=False)
        return f"exit {proc.returncode}" if proc.returncode != 0 else None
    from cli_in_process import run

    print(f"$ trtforge {' '.join(step['argv'])}", flush=True)
    done = run(step["argv"], env={"COLUMNS": os.environ.get("COLUMNS", "160")})
    print(done.stdout + done.stderr, flush=True)
    if done.returncode != step["exit"]:
        return f"trtforge {' '.join(step['argv'])}: expected exit {step['exit']}, got {done.returncode}"
    if step["text"] and step["text"] not in done.stdout + done.stderr:
        return f"trtforge {' '.join(step['argv'])}: expected in the output: {step['text']}"
    return None


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
