"""Run one page's examples in order in the current folder: ``python run_page.py EXAMPLES.json``; or, with
``--serve``, run pages and example scripts one after another in one process (``serve``, ``PageRunner``).

Python examples share one namespace (``runpy.run_path`` with the previous globals); shell examples run
with ``bash -e``. A ``console`` fence's plain ``trtforge ARGS`` lines run in this process through the console
script's entry point (``tests/support/cli_in_process.py``: a CLI process would pay seconds of imports for each),
its other lines with ``bash``; each must exit as the page says (0, or the ``# ... exit N`` it is marked with)
and print the ``error:`` line shown under it. The first failure prints ``doc example failed: PAGE:LINE`` and
exits 1.
"""

from __future__ import annotations

import contextlib
import json
import os
import runpy
import subprocess
import sys
import tempfile
import threading
import warnings
from collections.abc import Iterator
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


@contextlib.contextmanager
def _request_state(env: dict[str, str], cwd: str, log: str) -> Iterator[None]:
    """The environment ``env``, the working folder ``cwd``, file descriptors 1 and 2 on ``log`` (so a page's
    bash steps write there too); all put back afterwards."""
    saved_env, saved_cwd, saved_argv = dict(os.environ), os.getcwd(), list(sys.argv)
    sys.stdout.flush(), sys.stderr.flush()
    saved_fds = os.dup(1), os.dup(2)
    with open(log, "w") as out:
        try:
            os.environ.clear()
            os.environ.update(env)
            os.chdir(cwd)
            os.dup2(out.fileno(), 1), os.dup2(out.fileno(), 2)
            yield
        finally:
            sys.stdout.flush(), sys.stderr.flush()
            os.dup2(saved_fds[0], 1), os.dup2(saved_fds[1], 2)
            os.close(saved_fds[0]), os.close(saved_fds[1])
            os.chdir(saved_cwd)
            os.environ.clear()
            os.environ.update(saved_env)
            sys.argv[:] = saved_argv


def run_script(script: str, argv: list[str]) -> int:
    """``python SCRIPT ARGV...`` in this process; its exit status (a traceback is printed, status 1)."""
    sys.argv[:] = [script, *argv]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - the script failed: its traceback is the report
        import traceback

        traceback.print_exc()
        return 1
    return 0


def serve() -> int:
    """``python run_page.py --serve``: one JSON request a line on stdin, ``{"page": EXAMPLES.json}`` or ``{"script":
    PATH, "argv": [...]}`` with ``"env"``, ``"cwd"`` and ``"log"`` (where its output goes), run in this process one
    after the other; one ``{"rc": N}`` line on stdout each. A process pays seconds of imports (torch, trtforge) that
    each page and script paid again before."""
    reply = os.fdopen(os.dup(1), "w")
    for line in sys.stdin:
        request = json.loads(line)
        with _request_state(request["env"], request["cwd"], request["log"]):
            rc = main(request["page"]) if "page" in request else run_script(request["script"], request["argv"])
        reply.write(json.dumps({"rc": rc}) + "\n")
        reply.flush()
    return 0


class PageRunner:
    """The test side of ``serve``: one ``run_page.py --serve`` process, started on first use and again after one
    that died (an example that crashed the interpreter fails its own test only).

    Example:
        >>> rc, output = PageRunner(env).run({"page": "examples.json"}, env, cwd, log)
    """

    def __init__(self, env: dict[str, str]) -> None:
        self.env, self.proc = env, None

    def run(self, request: dict, env: dict[str, str], cwd: Path, log: Path, timeout: float = 1200) -> tuple[int, str]:
        """(exit status, what it printed into ``log``) of ``request`` run with ``env`` in ``cwd``."""
        if self.proc is None or self.proc.poll() is not None:
            self.proc = subprocess.Popen([sys.executable, __file__, "--serve"], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, text=True, env=self.env)
        self.proc.stdin.write(json.dumps({**request, "env": env, "cwd": str(cwd), "log": str(log)}) + "\n")
        self.proc.stdin.flush()
        answer: list[str] = []
        reader = threading.Thread(target=lambda: answer.append(self.proc.stdout.readline()), daemon=True)
        reader.start()
        reader.join(timeout)
        output = log.read_text(errors="replace") if log.is_file() else ""
        if not answer or not answer[0]:
            self.close()
            return -1, output + f"\n(run_page.py --serve {'timed out' if not answer else 'died'})"
        return json.loads(answer[0])["rc"], output

    def close(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            self.proc = None


if __name__ == "__main__":
    sys.exit(serve() if sys.argv[1] == "--serve" else main(sys.argv[1]))
