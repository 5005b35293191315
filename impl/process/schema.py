"""The process protocol as data: the JSON Schemas under ``protocol/`` (PROTOCOL.md).

One schema per request (``protocol/requests/<op>.schema.json``) and per result
(``protocol/results/<op>.schema.json``), plus the handshake, the error object, the
response envelope, the model reference and the value encodings they share. The
same files drive the ``cmd`` client (every answer is validated before it is
decoded), ``specgate engine`` (every result is validated before it is sent) and
PROTOCOL.md's tables (``python -m impl.process.schema`` prints them; a test keeps the
document and the files in agreement).

Validation works on the wire form (``$bytes``/``$array``/``$dict`` still
encoded) and answers ``None`` or one line naming the schema file, the keyword path
inside it and the offending value, e.g.
``results/encode.schema.json#/items/type at result[0]: 'a' is not of type 'integer'``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import referencing
import referencing.jsonschema

from impl.ops import BASE_URI, OPS, PROTOCOL, Protocol

VALUE_SHOWN = 120  # characters of an offending value quoted in a message


def _resources() -> dict[str, dict[str, Any]]:
    """Every schema file, by its path relative to ``protocol/`` (``results/encode.schema.json``),
    as ``impl.ops`` read them."""
    return PROTOCOL.documents


@cache
def _registry() -> referencing.Registry:
    resources = [
        (BASE_URI + name, referencing.jsonschema.DRAFT202012.create_resource(schema))
        for name, schema in _resources().items()
    ]
    return referencing.Registry().with_resources(resources)


def schema(name: str) -> dict[str, Any]:
    """A schema by its path under ``protocol/``: ``handshake.schema.json``, ``results/sample.schema.json``."""
    try:
        return _resources()[name]
    except KeyError:
        raise KeyError(f"no protocol schema {name!r}; known: {', '.join(sorted(_resources()))}") from None


@cache
def _validator(name: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(schema(name), registry=_registry())


def problem(name: str, value: Any, where: str = "value") -> str | None:
    """None when ``value`` follows schema ``name``; else one line naming the schema
    path and the offending value (the most relevant of the violations)."""
    errors = list(_validator(name).iter_errors(value))
    error = jsonschema.exceptions.best_match(errors)
    if error is None:
        return None
    error = _first_alike(error, errors)
    keyword_path = "/".join(str(p) for p in error.absolute_schema_path)
    at = where + "".join(f"[{p!r}]" if isinstance(p, str) else f"[{p}]" for p in error.absolute_path)
    shown = json.dumps(error.instance, ensure_ascii=False, default=str)
    if len(shown) > VALUE_SHOWN:
        shown = shown[: VALUE_SHOWN - 3] + "..."
    return f"{name}#/{keyword_path} at {at}: {_message(error)} (value {shown})"


def _first_alike(best: jsonschema.ValidationError, errors: list[jsonschema.ValidationError]) -> Any:
    """Of the violations of the same rule at the same depth as ``best`` (every bad
    item of a list), the first in the value's order: a message names the first offender."""
    alike = [
        e
        for e in errors
        if list(e.schema_path) == list(best.schema_path) and len(e.absolute_path) == len(best.absolute_path)
    ]
    return min(
        alike,
        key=lambda e: [(0, p, "") if isinstance(p, int) else (1, 0, str(p)) for p in e.absolute_path],
        default=best,
    )


def _message(error: jsonschema.ValidationError) -> str:
    """jsonschema's message without its repr of a long value (the value is quoted once, shortened)."""
    message = error.message.splitlines()[0]
    return message if len(message) <= 2 * VALUE_SHOWN else message[: 2 * VALUE_SHOWN - 3] + "..."


def result_problem(op: str, result: Any) -> str | None:
    """``problem`` for the ``result`` of an ``op`` answer (wire form)."""
    return problem(f"results/{op}.schema.json", result, where="result")


def request_problem(request: dict[str, Any]) -> str | None:
    """``problem`` for a request line (its op must have a schema)."""
    return problem(f"requests/{request.get('op')}.schema.json", request, where="request")


# ---------------------------------------------------------------------------
# PROTOCOL.md's tables, generated from the schemas


def request_fields(op: str) -> tuple[list[str], list[str]]:
    """(required, optional) field names of an op's request, without ``id`` and ``op``."""
    return list(OPS[op].required), list(OPS[op].optional)


def op_table(protocol: Protocol = PROTOCOL) -> str:
    """The op table of PROTOCOL.md section 4, from ``impl.ops``' table."""
    rows = ["| op | capability | request fields | `result` |", "|---|---|---|---|"]
    for op, spec in protocol.ops.items():
        fields = ", ".join([f"`{f}`" for f in spec.required] + [f"`{f}` (optional)" for f in spec.optional])
        result = _cell(protocol.documents[f"results/{op}.schema.json"]["description"])
        rows.append(f"| `{op}` | `{spec.capability}` | {fields} | {result} |")
    return "\n".join(rows)


def keys_table(op: str) -> str:
    """The key table of an object result (``sample``, ``generate``)."""
    result = schema(f"results/{op}.schema.json")
    rows = ["| key | required | value | meaning |", "|---|---|---|---|"]
    for key, spec in result["properties"].items():
        required = "yes" if key in result.get("required", ()) else "no"
        rows.append(f"| `{key}` | {required} | {_kind(spec)} | {_cell(spec.get('description', ''))} |")
    return "\n".join(rows)


def _cell(text: str) -> str:
    """Text for a Markdown table cell: a ``|`` (even inside a code span) must be escaped."""
    return text.replace("|", "\\|")


def _kind(spec: dict[str, Any]) -> str:
    """A short name for the value a property schema admits."""
    if "enum" in spec:
        return "one of " + ", ".join(f"`{v}`" for v in spec["enum"])
    ref = spec.get("$ref", "")
    if ref:
        return {"token_ids": "list of token ids", "hex": "hex string", "token_id": "token id"}.get(
            ref.rsplit("/", 1)[-1], ref
        )
    kind = spec.get("type")
    if kind == "array":
        items = spec.get("items", {})
        return f"list of {_kind(items)}" if "type" in items or "$ref" in items else "list of objects"
    if isinstance(kind, list):
        return " or ".join(kind)
    return str(kind)


def generated_tables() -> dict[str, str]:
    """Every generated table by the marker name it sits between in PROTOCOL.md."""
    return {"ops": op_table(), "sample": keys_table("sample"), "generate": keys_table("generate")}


def marked_sections(text: str) -> dict[str, str]:
    """The text between ``<!-- schema:NAME -->`` and ``<!-- /schema:NAME -->`` markers."""
    out = {}
    for name in _marker_names(text):
        start = text.index(f"<!-- schema:{name} -->") + len(f"<!-- schema:{name} -->")
        end = text.index(f"<!-- /schema:{name} -->", start)
        out[name] = text[start:end].strip("\n")
    return out


def _marker_names(text: str) -> Iterable[str]:
    for part in text.split("<!-- schema:")[1:]:
        yield part.split(" -->", 1)[0]


def main(argv: list[str]) -> int:
    """``python -m impl.process.schema [--write PROTOCOL.md]``: print the generated tables, or
    rewrite them in place between their markers."""
    tables = generated_tables()
    if argv[:1] == ["--write"] and len(argv) == 2:
        path = Path(argv[1])
        text = path.read_text(encoding="utf-8")
        for name, table in tables.items():
            start, end = f"<!-- schema:{name} -->", f"<!-- /schema:{name} -->"
            if start not in text or end not in text:
                print(f"{path}: no {start} ... {end} markers", file=sys.stderr)
                return 1
            head, rest = text.split(start, 1)
            text = head + start + "\n" + table + "\n" + end + rest.split(end, 1)[1]
        path.write_text(text, encoding="utf-8")
        return 0
    if argv:
        print("usage: python -m impl.process.schema [--write PROTOCOL.md]", file=sys.stderr)
        return 2
    for name, table in tables.items():
        print(f"<!-- schema:{name} -->\n{table}\n<!-- /schema:{name} -->\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
