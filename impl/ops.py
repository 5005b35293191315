"""The protocol's operations, read once from the schemas under ``protocol/`` (PROTOCOL.md).

The schema files are the one source; this table is what everything else reads:

* each request schema (``protocol/requests/<op>.schema.json``) gives its op's capability
  (``x-capability``), its place in the tables (``x-order``) and, in the order of its
  ``properties``, the arguments of the ``Engine`` method of that name — except a property
  marked ``"x-transport": true`` (``logits``' ``top_k``: the client's choice of answer
  form, not an argument) and collecting a method's keyword arguments in the one marked
  ``"x-keywords": true`` (``render``'s ``kwargs``); ``"x-may-ignore": true`` marks an
  argument an adapter's method may lack (``logits``' ``positions``: ``Op.invoke`` leaves
  it out);
* the handshake schema gives the protocol version (``protocol``'s ``const``) and the
  conformance classes (``classes``' enum).

``impl.protocol`` takes ``CAPABILITIES`` and ``CONFORMANCE_CLASSES`` from here; the
process client builds its requests and the server its calls from ``OPS``
(``impl.process``); the handshake's capabilities and ops are sets of these names;
PROTOCOL.md's op table is generated from it (``impl.process.schema``).
"""

from __future__ import annotations

import copy
import inspect
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from impl.datafiles import DATA_ROOT

PROTOCOL_DIR = DATA_ROOT / "protocol"
BASE_URI = "https://specgate.example/protocol/"


@dataclass(frozen=True)
class Argument:
    """One argument of an op's ``Engine`` method, as its request field carries it.

    ``kind`` says how the value travels (``impl.process.wire.to_wire``): ``model`` (a
    ``ModelRef``), ``ints`` (a list of integers), ``vector`` (a numeric array),
    ``number``, ``list``, ``keywords`` (the method's ``**kwargs``) or ``value`` (plain
    JSON data). An optional argument not given takes ``default``: the schema's, else
    None (then the field is not sent)."""

    name: str
    kind: str
    required: bool
    default: Any = None
    may_ignore: bool = False  # ``"x-may-ignore"``: an engine may ignore it (a hint, not an input)


@dataclass(frozen=True)
class Op:
    name: str
    capability: str
    arguments: tuple[Argument, ...]
    required: tuple[str, ...]  # request fields but id and op, in the schema's order
    optional: tuple[str, ...]
    transport: tuple[str, ...]  # fields the client chooses, not arguments (``top_k``)

    def bind(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """The arguments of a call ``engine.<op>(*args, **kwargs)`` by name, defaults
        filled in, as Python would bind them to the ``Engine`` method."""
        positional = [a for a in self.arguments if a.kind != "keywords"]
        if len(args) > len(positional):
            raise TypeError(f"{self.name}() takes {len(positional)} arguments, {len(args)} given")
        named = {a.name: v for a, v in zip(positional, args, strict=False)}
        extra = {}
        for key, value in kwargs.items():
            if key in named:
                raise TypeError(f"{self.name}() got multiple values for argument {key!r}")
            if any(a.name == key for a in positional):
                named[key] = value
            else:
                extra[key] = value
        keywords = [a for a in self.arguments if a.kind == "keywords"]
        if extra and not keywords:
            raise TypeError(f"{self.name}() got unexpected keyword arguments {', '.join(map(repr, extra))}")
        for a in positional:
            if a.name not in named:
                if a.required:
                    raise TypeError(f"{self.name}() missing required argument {a.name!r}")
                named[a.name] = copy.deepcopy(a.default)
        for a in keywords:
            named[a.name] = extra
        return named

    def invoke(self, engine: Any, named: Mapping[str, Any]) -> Any:
        """``engine.<op>(...)`` with the arguments ``bind`` gives (the inverse). An argument
        an engine may ignore (``"x-may-ignore"``: ``logits``' ``positions``, added to the
        protocol after adapters were written) is left out when the adapter's method does
        not take it: the adapter then answers as it always did (every row), as the
        protocol allows."""
        method = getattr(engine, self.name)
        positional = [a for a in self.arguments if a.kind != "keywords"]
        while positional and positional[-1].may_ignore and not takes(method, positional[-1].name):
            positional.pop()
        keywords = next((dict(named[a.name] or {}) for a in self.arguments if a.kind == "keywords"), {})
        return method(*(named[a.name] for a in positional), **keywords)


def accepted(op: str, method: Any, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """``kwargs`` of a direct call ``method(..., **kwargs)`` of ``op`` less the arguments
    the engine may ignore that ``method`` does not take (as ``Op.invoke`` does)."""
    ignorable = {a.name for a in OPS[op].arguments if a.may_ignore} if op in OPS else set()
    return {k: v for k, v in kwargs.items() if k not in ignorable or takes(method, k)}


def takes(method: Any, name: str) -> bool:
    """Whether ``method`` (a bound method or function) takes an argument ``name``: a
    parameter of that name, ``*args`` or ``**kwargs``; a signature that cannot be read takes it."""
    try:
        parameters = inspect.signature(method).parameters
    except (TypeError, ValueError):
        return True
    variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    return name in parameters or any(p.kind in variadic for p in parameters.values())


@dataclass(frozen=True)
class Protocol:
    version: str
    ops: dict[str, Op]  # in the order of PROTOCOL.md's op table (``x-order``)
    capabilities: tuple[str, ...]  # each op's capability, first appearance first
    classes: tuple[str, ...]
    documents: dict[str, dict[str, Any]]  # every schema file by its path under protocol/


def _kind(spec: dict[str, Any]) -> str:
    ref = spec.get("$ref", "")
    if spec.get("x-keywords"):
        return "keywords"
    if ref.endswith("model.schema.json"):
        return "model"
    if ref.endswith("/token_ids") or (
        spec.get("type") == "array" and spec.get("items", {}).get("type") == "integer"
    ):
        return "ints"
    if ref.endswith("/float32_vector"):
        return "vector"
    if spec.get("type") == "number":
        return "number"
    if spec.get("type") == "array":
        return "list"
    return "value"


def _op(name: str, request: dict[str, Any]) -> Op:
    fields = {k: v for k, v in request["properties"].items() if k not in ("id", "op")}
    required = tuple(f for f in fields if f in request["required"])
    arguments = tuple(
        Argument(f, _kind(spec), f in required, spec.get("default"), bool(spec.get("x-may-ignore")))
        for f, spec in fields.items()
        if not spec.get("x-transport")
    )
    transport = tuple(f for f, spec in fields.items() if spec.get("x-transport"))
    optional = tuple(f for f in fields if f not in required)
    return Op(name, request["x-capability"], arguments, required, optional, transport)


def load(directory: Path = PROTOCOL_DIR) -> Protocol:
    """The table from the schema files in ``directory`` (each ``$id`` checked)."""
    documents = {}
    for path in sorted(directory.rglob("*.schema.json")):
        document = json.loads(path.read_text(encoding="utf-8"))
        relative = path.relative_to(directory).as_posix()
        if document.get("$id") != BASE_URI + relative:
            raise ValueError(f"{path}: $id must be {BASE_URI + relative!r}, found {document.get('$id')!r}")
        documents[relative] = document
    requests = {
        name.removeprefix("requests/").removesuffix(".schema.json"): document
        for name, document in documents.items()
        if name.startswith("requests/")
    }
    order = sorted(requests, key=lambda op: (requests[op].get("x-order", 99), op))
    ops = {op: _op(op, requests[op]) for op in order}
    hello = documents["handshake.schema.json"]["properties"]
    return Protocol(
        version=hello["protocol"]["const"],
        ops=ops,
        capabilities=tuple(dict.fromkeys(op.capability for op in ops.values())),
        classes=tuple(hello["classes"]["items"]["enum"]),
        documents=documents,
    )


PROTOCOL = load()
VERSION = PROTOCOL.version
OPS = PROTOCOL.ops
CAPABILITIES = PROTOCOL.capabilities
CONFORMANCE_CLASSES = PROTOCOL.classes
