"""The generated reference pages say what the code says: the CLI page lists every command and option of
the typer app (a new option appears without editing a page), and the sidecar schema files are the
schema generated from the sidecar dataclasses."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated

import typer

from trtforge.cli.reference import cli_reference, click_command, params_of, walk
from trtforge.core.sidecar_schema import PACKAGE_FILE, build_schema, schema_text, sidecar_schema

ROOT = Path(__file__).resolve().parents[2]


def _sections(page: str) -> dict[str, str]:
    """``{"trtforge build": its section's text, ...}`` from the page's headings."""
    parts = re.split(r"^#{2,4} (trtforge[^\n]*)$", page, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_cli_page_lists_every_command_and_option_of_the_app():
    sections = _sections(cli_reference())
    commands = list(walk(click_command()))
    assert {path for path, _ in commands} == set(sections)
    assert {"trtforge build", "trtforge cache prune", "trtforge export triton"} <= set(sections)
    for path, command in commands:
        for param in params_of(command):
            names = param.opts + param.secondary_opts if param.param_type_name == "option" else [param.name.upper()]
            for name in names:
                assert f"`{name}`" in sections[path], f"{path}: {name} missing from the CLI reference"
            if getattr(param, "help", None):
                assert " ".join(param.help.split()).replace("|", "\\|") in sections[path]


def test_a_new_option_appears_in_the_page_without_editing_it():
    scratch = typer.Typer()

    @scratch.command()
    def build(precision: str = "fp16") -> None:
        """Build."""

    @scratch.command()
    def serve(port: int = 8000) -> None:
        """Serve."""

    before = cli_reference(scratch)
    assert "--brand-new" not in before

    @scratch.command(name="build")
    def build_with_new(precision: str = "fp16",
                       brand_new: Annotated[int, typer.Option(help="a new knob")] = 3) -> None:
        """Build."""

    after = _sections(cli_reference(scratch))
    assert "| `--brand-new` | int | `3` | a new knob |" in after["trtforge build"]


def test_schema_files_are_the_generated_schema():
    text = schema_text()
    for path in (ROOT / "docs" / PACKAGE_FILE, ROOT / "trtforge" / "core" / PACKAGE_FILE):
        assert path.read_text() == text, f"{path} is stale: python -m trtforge.core.sidecar_schema --write"
    assert sidecar_schema() == build_schema()


def test_schema_follows_the_dataclasses():
    schema = build_schema()
    props = schema["properties"]
    assert props["builder"]["properties"]["targets"] == {"type": "array", "items": {"type": "string"}}
    assert props["preprocessing"]["anyOf"][0]["required"] == ["resize"]
    assert props["profiles"]["items"]["additionalProperties"]["additionalProperties"] == {
        "type": "array", "items": {"type": "integer"}}
    assert set(schema["required"]) >= {"name", "engine", "inputs", "outputs", "generator"}
    json.dumps(schema)


def test_readme_is_a_landing_page_whose_links_resolve():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 150, "README.md is the landing page: move details into docs/"
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    assert links
    missing = [link for link in links if not link.startswith("http") and not (ROOT / link).exists()]
    assert not missing, f"README.md links to files that do not exist: {missing}"


def test_bench_readme_lists_every_script_and_its_links_resolve():
    """bench/README.md is the one list of the benchmark scripts: each has a row, and each link resolves to a
    file and, where it names one, a heading of that page (mkdocs' anchors)."""
    from markdown.extensions.toc import slugify

    readme = ROOT / "bench" / "README.md"
    text = readme.read_text()
    scripts = {p.relative_to(ROOT / "bench").as_posix() for p in (ROOT / "bench").rglob("*")
               if p.suffix in (".py", ".sh")}
    helpers = {"quant_data.py", "modelopt_ptq.py", "modelopt_venv.sh"}  # named in quant_accuracy.py's row
    listed = set(re.findall(r"^\| \[`([\w/.]+)`\]", text, flags=re.M))
    assert listed == scripts - helpers, (f"bench/README.md: no row for {sorted(scripts - helpers - listed)}, "
                                         f"a row but no script for {sorted(listed - scripts)}")
    assert all(f"`{name}`" in text for name in helpers)
    links = re.findall(r"\]\(([^)#]+)(?:#([^)]+))?\)", text)
    assert links
    for target, anchor in links:
        page = (readme.parent / target).resolve()
        assert page.is_file(), f"bench/README.md links to a missing file: {target}"
        if anchor:
            headings = re.findall(r"^#{1,6} (.+)$", page.read_text(), flags=re.M)
            assert anchor in {slugify(h, "-") for h in headings}, f"bench/README.md: no heading #{anchor} in {target}"

def test_every_benchmark_result_names_its_command_machine_and_date():
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    sections = re.split(r"^## ", text, flags=re.M)[1:]
    assert len(sections) > 5
    for section in sections:
        title = section.splitlines()[0]
        if title.startswith("Machines"):
            continue
        assert re.search(r"bench/(repro/)?\w+\.(py|sh)|`trtforge |make \w+", section), f"benchmarks.md '{title}': name the command"
        assert re.search(r"H200|CPU", section), f"benchmarks.md '{title}': name the machine"
        if not re.search(r"\*\*(H200: )?pending", section, flags=re.I):  # a run not made yet has no date
            assert re.search(r"20\d\d-\d\d-\d\d", section), f"benchmarks.md '{title}': give the date"
