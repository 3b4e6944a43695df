"""mkdocs hooks: what the site shows from the code is generated when it is built, never kept by hand.

- ``reference-cli.md``: every command and option of the ``trtforge`` typer app (``trtforge.cli.reference``);
- ``changelog.md``: the repository's CHANGELOG.md, so the site and the file are one text;
- ``<!-- example: examples/NAME.py -->`` in a page: the script itself, as a fenced Python block
  (tests/docs/test_examples.py runs each script and compares the lines the page quotes);
- ``<!-- sidecar-fields -->``: one table row per sidecar key, from docs/sidecar.schema.json;
- ``<!-- error-classes -->``: the error tree of ``trtforge.core.errors`` with each class's exit code;
- ``<!-- routes-table -->``: the runtime routes, from ``trtforge.core.routes.ROUTES``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = re.compile(r"^<!-- example: (examples/[\w.-]+\.py) -->$", re.M)


def on_files(files, config):
    from trtforge.cli.reference import cli_reference

    changelog = (ROOT / "CHANGELOG.md").read_text()
    for uri, content in (("reference-cli.md", cli_reference()), ("changelog.md", changelog)):
        files.append(File.generated(config, uri, content=content))
    return files


def _example(match: re.Match) -> str:
    path = ROOT / match.group(1)
    return f'```python title="{match.group(1)}"\n{path.read_text().rstrip()}\n```'


def _type(schema: dict) -> str:
    if "anyOf" in schema:
        return " or ".join(_type(s) for s in schema["anyOf"])
    if "const" in schema:
        return f'"{schema["const"]}"'
    kind = schema.get("type", "any")
    if kind == "array" and "items" in schema:
        return f"array of {_type(schema['items'])}"
    return kind


def _rows(schema: dict, prefix: str = "") -> list[str]:
    rows = []
    required = set(schema.get("required", ()))
    for key, sub in schema.get("properties", {}).items():
        name = f"{prefix}{key}"
        target = next((s for s in sub.get("anyOf", ()) if s.get("type") == "object"), sub)
        description = sub.get("description", target.get("description", ""))
        rows.append(f"| `{name}` | {_type(sub).replace('|', '/')} | {'yes' if key in required else ''} "
                    f"| {description} |")
        if target.get("type") == "object" and target.get("properties"):
            rows += _rows(target, f"{name}.")
        elif target.get("type") == "array" and target.get("items", {}).get("properties"):
            rows += _rows(target["items"], f"{name}[].")
    return rows


def sidecar_fields() -> str:
    schema = json.loads((ROOT / "docs" / "sidecar.schema.json").read_text())
    return "\n".join(["| key | type | required | what |", "|---|---|---|---|", *_rows(schema)])


def error_classes() -> str:
    """One row per error class: what it derives from, the CLI's exit code, its docstring's first line."""
    import inspect

    from trtforge.cli.app import EXIT_FAILED, EXIT_USER_ERROR
    from trtforge.core import errors

    rows = ["| class | also a | CLI exit | what |", "|---|---|---|---|"]
    for name, cls in inspect.getmembers(errors, inspect.isclass):
        if not issubclass(cls, errors.TrtforgeError) or cls.__module__ != errors.__name__:
            continue
        builtins = ", ".join(f"`{b.__name__}`" for b in cls.__mro__[1:] if b.__module__ == "builtins"
                             and b not in (Exception, BaseException, object))
        code = EXIT_USER_ERROR if issubclass(cls, errors.UserError) else EXIT_FAILED
        doc = " ".join((cls.__doc__ or "").strip().split("\n\n")[0].split()).replace("|", "\\|")
        rows.append(f"| `{name}` | {builtins} | {code} | {doc} |")
    return "\n".join(rows)


def routes_table() -> str:
    from trtforge.core.routes import ROUTES

    rows = ["| route | what runs | what it needs |", "|---|---|---|"]
    rows += [f"| `{r.name}` | {r.runs} | {r.needs} |" for r in ROUTES]
    return "\n".join(rows)


def on_page_markdown(markdown, page, config, files):
    markdown = EXAMPLE.sub(_example, markdown)
    markdown = markdown.replace("<!-- error-classes -->", error_classes())
    markdown = markdown.replace("<!-- routes-table -->", routes_table())
    return markdown.replace("<!-- sidecar-fields -->", sidecar_fields())
