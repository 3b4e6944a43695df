"""The sidecar's JSON Schema, generated from the typed sidecar dataclasses (``trtforge.core.sidecar``).

A C++ service, Triton or DeepStream reads the sidecar without trtforge; this schema (draft 2020-12)
tells them what it holds. It ships in the wheel (``trtforge/core/sidecar.schema.json``, read with
``sidecar_schema()``) and is published as ``docs/sidecar.schema.json``; both are this module's output
(``python -m trtforge.core.sidecar_schema --write``), and a test keeps them in step with the classes.
Readers ignore keys they do not know, so every object allows more properties than it lists.

Example:
    >>> schema = sidecar_schema()
    >>> schema["properties"]["engine"]["required"]
    ['file', 'size', 'sha256']
"""

from __future__ import annotations

import dataclasses
import json
import sys
import types
import typing
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from trtforge.core import sidecar as sc
from trtforge.core.preprocessing import PreprocessConfig
from trtforge.core.specs import TensorSpec

PACKAGE_FILE = "sidecar.schema.json"
#: Dataclass fields whose JSON key differs from the field name (the record's ``to_dict`` writes these).
JSON_KEYS: dict[type, dict[str, str]] = {PreprocessConfig: {"size": "resize"}}
#: Top-level ``Sidecar`` fields that are not keys of their own: the engine trio is the ``engine`` object.
TOP_LEVEL_SKIP = frozenset({"engine_file", "engine_size", "engine_sha256", "extra", "path"})
_SCALARS = {str: "string", int: "integer", float: "number", bool: "boolean"}


def _type_schema(hint: Any) -> dict[str, Any]:
    """JSON Schema of one Python type hint (the few shapes the sidecar's records use)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return {}
    if hint is type(None):
        return {"type": "null"}
    if hint in _SCALARS:
        return {"type": "number"} if hint is float else {"type": _SCALARS[hint]}
    if origin in (typing.Union, types.UnionType):
        options = [_type_schema(a) for a in args]
        return {} if {} in options else {"anyOf": options}
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": _type_schema(args[0])}
        return {"type": "array", "prefixItems": [_type_schema(a) for a in args], "minItems": len(args),
                "maxItems": len(args)}
    if origin is list:
        return {"type": "array", "items": _type_schema(args[0])} if args else {"type": "array"}
    if origin in (dict, Mapping) or hint in (dict, Mapping):
        value = _type_schema(args[1]) if args else {}
        return {"type": "object", "additionalProperties": value or True}
    if dataclasses.is_dataclass(hint):
        return record_schema(hint)
    raise TypeError(f"no JSON Schema for the sidecar field type {hint!r}; extend _type_schema")


def record_schema(cls: type) -> dict[str, Any]:
    """One record class as a JSON object: its fields (JSON names), required when they have no default."""
    hints = typing.get_type_hints(cls)
    renames = JSON_KEYS.get(cls, {})
    properties, required = {}, []
    for f in dataclasses.fields(cls):
        if f.name == "extra":
            continue
        key = renames.get(f.name, f.name)
        properties[key] = _type_schema(hints[f.name])
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            required.append(key)
    schema: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": True}
    if required:
        schema["required"] = required
    if cls.__doc__:
        schema["description"] = " ".join(cls.__doc__.split("\n\n")[0].split())
    return schema


def build_schema() -> dict[str, Any]:
    """The whole sidecar schema, from ``Sidecar``'s fields (its ``BuildRecord``'s spread in) and its records'
    dataclasses."""
    hints = {**typing.get_type_hints(sc.Sidecar), **typing.get_type_hints(sc.BuildRecord)}
    properties: dict[str, Any] = {
        "schema_version": {"type": "integer", "maximum": sc.SCHEMA_VERSION},
        "generator": {"const": sc.GENERATOR},
    }
    for f in _top_level_fields():
        if f.name in TOP_LEVEL_SKIP or f.name in properties:
            continue
        if f.name in ("inputs", "outputs"):
            properties[f.name] = {"type": "array", "items": record_schema(TensorSpec)}
        else:
            properties[f.name] = _type_schema(hints[f.name])
        if f.name == "name":
            properties["engine"] = record_schema(sc.EngineRecord)
    required = ["schema_version", "generator",
                *dict.fromkeys(keys[0] for keys, _types, _what in sc.REQUIRED_KEYS)]
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "trtforge engine sidecar",
        "description": " ".join((sc.__doc__ or "").split("\n\n")[1].split()),
        "type": "object",
        "required": required,
        "properties": properties,
        "additionalProperties": True,
    }


def _top_level_fields() -> list[dataclasses.Field]:
    """``Sidecar``'s fields with its ``build`` (a ``BuildRecord``) spread in place: the JSON holds the build's
    fields as top-level keys."""
    found: list[dataclasses.Field] = []
    for f in dataclasses.fields(sc.Sidecar):
        found += dataclasses.fields(sc.BuildRecord) if f.name == "build" else [f]
    return found


def schema_text() -> str:
    """The schema as the files hold it: indented JSON, one trailing newline."""
    return json.dumps(build_schema(), indent=2) + "\n"


def sidecar_schema() -> dict[str, Any]:
    """The schema shipped in the package (no generation at run time)."""
    return json.loads(resources.files("trtforge.core").joinpath(PACKAGE_FILE).read_text())


def main(argv: list[str]) -> None:
    """``--write``: regenerate the package's and the docs' copy; otherwise print the schema."""
    if "--write" not in argv:
        sys.stdout.write(schema_text())
        return
    root = Path(__file__).resolve().parents[2]
    for path in (Path(__file__).with_name(PACKAGE_FILE), root / "docs" / PACKAGE_FILE):
        path.write_text(schema_text())
        print(f"wrote {path}")


if __name__ == "__main__":
    main(sys.argv[1:])
