"""The fenced examples of README.md and docs/**/*.md, and how each one runs (docs/DEVELOPING.md, "Doc examples").

A fence's info string says what it is:

- ``python``: run, the page's python fences in order in one namespace (``runpy``, in the test process's page runner, ``run_page.py --serve``);
- ``bash``, ``sh``, ``console``: run with ``bash -e`` (``console``: only the ``$ `` lines and their ``\\``
  continuations); ``trtforge`` is this checkout's CLI;
- ``text``: output, a diagram or a listing; never run. A fence without an info string is refused, so
  an example cannot hide in one.

An HTML comment on the line right before a fence marks an example that does not run here:

- ``<!-- doc-example: gpu -->``: needs an NVIDIA GPU (no TensorRT engine runs on the CI machine);
- ``<!-- doc-example: no-run REASON -->``: cannot run in CI for REASON (it installs from the network,
  runs forever, ...); the reason is required and listed by ``tests/docs/test_doc_examples.py -rs``.

Every page runs in a fresh folder. A page's hidden setup, in an HTML comment that holds one fenced
``python`` block (``<!-- doc-example: setup`` ... ``-->``), runs first: it writes the files and names
the page's examples use (a small model, ``model``, ``x``...), with the helpers of ``tests/docs/sandbox.py``.

Example:
    >>> [e.kind for e in examples(Path("docs/quantization.md"))][:2]
    ['python', 'console']
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUNNABLE = {"python": "python", "bash": "bash", "sh": "bash", "console": "console"}
MARKER = re.compile(r"^<!--\s*doc-example:\s*(gpu|no-run|setup)\b\s*(.*?)\s*(-->)?\s*$", re.DOTALL)


@dataclass(frozen=True)
class Example:
    """One fence: where it is, what kind, its code, and why it does not run (``skip``; None: it runs)."""

    page: Path
    line: int  # 1-based line of the opening fence
    kind: str  # python | bash | console | text | setup
    code: str
    skip: str | None = None

    @property
    def id(self) -> str:
        return f"{self.page.relative_to(ROOT).as_posix()}:{self.line}"


def pages() -> list[Path]:
    """README.md and every .md under docs/ (the benchmark history is a log of past runs, not examples)."""
    return [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").rglob("*.md"))]


def _setup(html: str, page: Path, line: int) -> Example:
    body = re.search(r"```python\n(.*?)```", html, re.DOTALL)
    if body is None:
        raise ValueError(f"{page}:{line}: a doc-example setup comment holds one ```python fence")
    return Example(page, line, "setup", body.group(1))


def examples(page: Path) -> list[Example]:
    """Every fence of ``page`` (and its hidden setup), in order. Raises ValueError on a fence without an info
    string or an unknown marker."""
    from markdown_it import MarkdownIt

    found: list[Example] = []
    marker: tuple[str, str] | None = None
    for token in MarkdownIt("commonmark").parse(page.read_text(encoding="utf-8")):
        line = token.map[0] + 1 if token.map else 0
        if token.type == "html_block":
            match = MARKER.match(token.content.strip())
            if match and match.group(1) == "setup":
                found.append(_setup(token.content, page, line))
            elif match:
                marker = (match.group(1), match.group(2).strip())
            continue
        if token.type != "fence":
            marker = None
            continue
        info = token.info.strip().split(" ")[0]
        if not info:
            raise ValueError(f"{page.name}:{line}: a fence without an info string; write ```text for output or a "
                             "diagram, or ```python / ```bash for an example")
        kind = RUNNABLE.get(info, "text")
        skip = None
        if marker is not None:
            what, reason = marker
            if what == "no-run" and not reason:
                raise ValueError(f"{page.name}:{line}: <!-- doc-example: no-run REASON --> needs a reason")
            skip = "needs an NVIDIA GPU" if what == "gpu" else reason
        found.append(Example(page, line, kind, token.content, skip))
        marker = None
    return found


#: A command whose trailing comment ends in ``exit N`` must exit with N (an example of a refusal).
EXPECTED_EXIT = re.compile(r"#[^#]*\bexit (\d+)\s*$")
#: Runs ``$3`` with bash; fails unless it exits with ``$1`` and (when ``$2`` is not empty) prints ``$2``.
EXPECT = ('__expect() { local out rc; set +e; out=$(bash -c "$3" 2>&1); rc=$?; set -e; printf "%s\\n" "$out"; '
          '[ "$rc" = "$1" ] || { echo "expected exit $1, got $rc: $3" >&2; return 1; }; '
          '[ -z "$2" ] || grep -qF -- "$2" <<<"$out" || { echo "expected in the output: $2" >&2; return 1; }; }\n')


def expect_exits(code: str, quoted: dict[int, str] | None = None) -> str:
    """``code`` with each one-line command marked ``# ... exit N`` run through ``__expect``: it must exit with N,
    and print ``quoted[line]`` (the ``error:`` line a ``console`` fence shows under it, up to a ``...``)."""
    import shlex

    out, marked = [], False
    for index, line in enumerate(code.splitlines()):
        match = EXPECTED_EXIT.search(line)
        if match is None or line.rstrip().endswith("\\"):
            out.append(line)
            continue
        marked = True
        command = line[:match.start()].rstrip()
        text = (quoted or {}).get(index, "")
        out.append(f"__expect {match.group(1)} {shlex.quote(text)} {shlex.quote(command)}")
    return (EXPECT if marked else "") + "\n".join(out) + "\n"


#: A command line bash must run (a pipe, a redirection, a variable, a glob, a second command...); any other
#: ``trtforge ...`` line runs in the page's process (``console_steps``).
SHELL_ONLY = re.compile(r"[|&;<>()$`*?\[\]{}~!]")


def _needs_a_shell(command: str) -> bool:
    """Whether bash must run ``command``: shell syntax outside quotes and outside a trailing ``# comment``, or a
    ``$`` or backtick inside double quotes."""
    if re.search(r'"[^"]*[$`][^"]*"', command):
        return True
    bare = re.sub(r"'[^']*'|\"[^\"]*\"", "", command)
    return bool(SHELL_ONLY.search(re.sub(r"(^|\s)#.*$", "", bare)))


def console_steps(code: str) -> list[dict]:
    """The commands of a ``console`` fence as steps ``run_page.py`` runs one by one: a plain ``trtforge ARGS``
    line (no shell syntax) as ``{"argv": [...], "exit": N, "text": ...}``, run in the page's process (a CLI
    process pays seconds of imports before it does anything); anything else as ``{"bash": CODE}``."""
    lines, quoted, going = [], {}, False
    for line in code.splitlines():
        if line.startswith("$ "):
            lines.append(line[2:])
            going = line.rstrip().endswith("\\")
        elif going:
            lines[-1] = lines[-1].rstrip()[:-1].rstrip() + " " + line.strip()
            going = line.rstrip().endswith("\\")
        elif line.startswith("error: ") and lines:
            quoted[len(lines) - 1] = line.split("...")[0].rstrip().rstrip(";")
    return [_step(line, quoted.get(index, "")) for index, line in enumerate(lines)]


def bash_steps(code: str) -> list[dict]:
    """A ``bash`` fence as steps: each command in process where every line is a plain ``trtforge ARGS`` (or a
    comment), else the whole fence as one ``{"bash": CODE}`` step (``expect_exits``)."""
    lines: list[str] = []
    going = False
    for line in code.splitlines():
        if going:
            lines[-1] = lines[-1].rstrip()[:-1].rstrip() + " " + line.strip()
        elif line.strip() and not line.lstrip().startswith("#"):
            lines.append(line)
        going = line.rstrip().endswith("\\")
    steps = [_step(line, "") for line in lines]
    return steps if all("argv" in step for step in steps) else [{"bash": expect_exits(code)}]


def _step(line: str, text: str) -> dict:
    import shlex

    match = EXPECTED_EXIT.search(line)
    command = line[:match.start()].rstrip() if match else line
    if command.startswith("trtforge ") and not _needs_a_shell(command):
        return {"argv": shlex.split(command, comments=True)[1:], "exit": int(match.group(1)) if match else 0,
                "text": text}
    return {"bash": expect_exits(line, {0: text} if text else None)}
