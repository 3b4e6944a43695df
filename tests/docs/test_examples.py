"""Every tutorial script in examples/ runs on the CPU and prints the lines its page quotes.

A tutorial page shows its script with ``<!-- example: examples/NAME.py -->`` (docs/hooks.py puts the file
there when the site is built) and quotes what it prints in the ``text`` block after
``<!-- output: examples/NAME.py -->``; each quoted line must be a line the script printed.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
EXAMPLES = sorted(p.name for p in (ROOT / "examples").glob("*.py"))
OUTPUT = re.compile(r"^<!-- output: examples/([\w.-]+\.py) -->\n```text\n(.*?)^```$", re.M | re.S)
SHOWN = re.compile(r"^<!-- example: examples/([\w.-]+\.py) -->$", re.M)


def quoted_outputs() -> dict[str, list[str]]:
    """``{script name: the lines its page quotes}`` from every page of the site."""
    found: dict[str, list[str]] = {}
    for page in sorted(DOCS.glob("*.md")):
        for name, block in OUTPUT.findall(page.read_text()):
            assert name not in found, f"{name}'s output is quoted twice ({page.name})"
            found[name] = block.splitlines()
    return found


def test_every_example_has_a_page_that_shows_it_and_quotes_its_output():
    shown = {name for page in DOCS.glob("*.md") for name in SHOWN.findall(page.read_text())}
    quoted = quoted_outputs()
    assert EXAMPLES and set(EXAMPLES) == shown == set(quoted)
    assert all(lines for lines in quoted.values()), "a page quotes no output for its script"


@pytest.mark.slow
@pytest.mark.parametrize("name", EXAMPLES)
def test_example_prints_what_its_page_says(name, tmp_path, page_runner):
    """``python examples/NAME.py OUT`` (run by the worker's ``page_runner`` process, as ``python`` would run it)."""
    work = tmp_path / "work"
    work.mkdir()
    rc, output = page_runner.run({"script": str(ROOT / "examples" / name), "argv": [str(tmp_path / "out")]},
                                 {**os.environ, "PYTHONWARNINGS": "ignore"}, work, tmp_path / "script.log")
    assert rc == 0, output[-3000:]
    printed = [line.rstrip() for line in output.splitlines()]
    missing = [line for line in quoted_outputs()[name] if line.rstrip() not in printed]
    assert not missing, f"{name} did not print these lines its page quotes: {missing}\nit printed:\n{output}"
