"""One protocol source: the schemas under ``protocol/`` are read once into ``impl.ops``,
and the ``Engine`` interface, the ``cmd`` client, the server, the handshake and
PROTOCOL.md's op table are derived from that table, not restated beside it.

Python's own binding of the ``Engine`` methods (``inspect.signature``) is the
reference for the arguments the table derives; a copy of ``protocol/`` with an op
added shows that a schema change reaches every derived place.
"""

from __future__ import annotations

import ast
import inspect
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from impl import ops
from impl.ops import CAPABILITIES, CONFORMANCE_CLASSES, OPS
from impl.process import schema, wire
from impl.process.client import CmdEngine
from impl.protocol import Engine, ModelRef
from tests.engines.fault_engine import ToyEngine, ToyWithoutRenderTemplate

ROOT = Path(__file__).resolve().parents[2]
MODEL = ModelRef("toy-model", Path("/nonexistent/toy.gguf"), "ab" * 32)


def method_parameters(op: str) -> list[inspect.Parameter]:
    return list(inspect.signature(getattr(Engine, op)).parameters.values())[1:]  # without self


@pytest.mark.parametrize("op", list(OPS))
def test_each_op_s_schema_arguments_are_its_engine_method_s_parameters_in_order(op: str) -> None:
    params = method_parameters(op)
    positional = [p for p in params if p.kind is not p.VAR_KEYWORD]
    arguments = [a for a in OPS[op].arguments if a.kind != "keywords"]
    assert [a.name for a in arguments] == [p.name for p in positional]
    for a, p in zip(arguments, positional, strict=True):
        assert a.required == (p.default is p.empty), f"{op}({a.name}): required in one, not the other"
        if not a.required:
            assert a.default == p.default, f"{op}({a.name}): the schema's default is not the method's"
    has_var_keyword = any(p.kind is p.VAR_KEYWORD for p in params)
    assert has_var_keyword == any(a.kind == "keywords" for a in OPS[op].arguments)


CALLS: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
    ("metadata", (MODEL,), {}),
    ("render", (MODEL, [{"role": "user", "content": "x"}]), {}),
    ("render", (MODEL, []), {"add_generation_prompt": False, "enable_thinking": True, "tools": [1]}),
    ("render", (MODEL,), {"messages": [], "kwargs": {"a": 1}}),  # a template variable named kwargs
    ("render_template", ("{{x}}",), {"context": {"x": 1}}),
    ("encode", (MODEL, "t"), {"parse_special": True}),
    ("logits", (MODEL, [1, 2]), {}),
    ("sample", (np.zeros(3, dtype=np.float32), {}, 0.5), {}),
    ("trace", (MODEL, [1], ["inp_embd"]), {}),
    ("trace", (MODEL, [1], ["inp_embd"]), {"positions": [0]}),
    ("session_open", (MODEL,), {}),
    ("session_append", ("s1", [1, 2]), {}),
    ("session_truncate", ("s1",), {"n": 1}),
    ("session_close", ("s1",), {}),
]


@pytest.mark.parametrize(("op", "args", "kwargs"), CALLS)
def test_binding_a_call_by_the_table_is_python_s_binding(op: str, args: tuple, kwargs: dict) -> None:
    bound = inspect.signature(getattr(Engine, op)).bind(None, *args, **kwargs)
    bound.apply_defaults()
    expected = {name: value for name, value in bound.arguments.items() if name != "self"}
    assert OPS[op].bind(args, kwargs) == expected


@pytest.mark.parametrize(
    ("op", "args", "kwargs"),
    [
        ("encode", (MODEL, "t"), {}),  # parse_special missing
        ("encode", (MODEL, "t", True, 1), {}),  # one too many
        ("decode", (MODEL, [1]), {"skip": True}),  # no such argument
        ("split", (MODEL, "t"), {"text": "u"}),  # given twice
    ],
)
def test_a_call_python_refuses_the_table_refuses(op: str, args: tuple, kwargs: dict) -> None:
    with pytest.raises(TypeError):
        inspect.signature(getattr(Engine, op)).bind(None, *args, **kwargs)
    with pytest.raises(TypeError):
        OPS[op].bind(args, kwargs)


def test_a_request_s_fields_come_back_as_the_call_s_arguments() -> None:
    """The client's wire form and the server's reading of it are inverses, for every call above."""
    for op, args, kwargs in CALLS:
        named = OPS[op].bind(args, kwargs)
        fields = json.loads(wire.dumps(wire.request_fields(OPS[op], named)))
        assert schema.request_problem({"id": 1, "op": op, **fields}) is None, (op, fields)
        back = wire.call_arguments(OPS[op], fields)
        for name, value in named.items():
            if isinstance(value, np.ndarray):
                assert np.array_equal(back[name], value) and back[name].dtype == value.dtype
            else:
                assert back[name] == value, (op, name)


def test_the_handshake_schema_names_the_derived_capabilities_and_ops() -> None:
    hello = schema.schema("handshake.schema.json")["properties"]
    assert hello["capabilities"]["items"]["enum"] == list(CAPABILITIES)
    assert hello["ops"]["items"]["enum"] == list(OPS)
    assert hello["classes"]["items"]["enum"] == list(CONFORMANCE_CLASSES) == ["exact", "quantized"]
    assert wire.PROTOCOL == hello["protocol"]["const"] == "specgate-jsonl/1"
    assert CAPABILITIES == ("metadata", "render", "split", "encode", "decode", "logits", "sample", "generate",
                            "trace", "session", "conversation", "batch")  # fmt: skip


def test_an_op_added_to_the_schemas_reaches_the_table_the_wire_and_protocol_md(tmp_path: Path) -> None:
    copy = tmp_path / "protocol"
    shutil.copytree(ops.PROTOCOL_DIR, copy)
    request = json.loads((copy / "requests/decode.schema.json").read_text(encoding="utf-8"))
    request["$id"] = ops.BASE_URI + "requests/detokenize.schema.json"
    request["x-capability"], request["x-order"] = "decode", 6.5
    request["properties"]["op"] = {"const": "detokenize"}
    request["properties"]["strip"] = {"type": "boolean", "default": False}
    (copy / "requests/detokenize.schema.json").write_text(json.dumps(request), encoding="utf-8")
    result = json.loads((copy / "results/decode.schema.json").read_text(encoding="utf-8"))
    result["$id"], result["description"] = ops.BASE_URI + "results/detokenize.schema.json", "text"
    (copy / "results/detokenize.schema.json").write_text(json.dumps(result), encoding="utf-8")

    table = ops.load(copy)
    assert list(table.ops).index("detokenize") == list(table.ops).index("decode") + 1
    op = table.ops["detokenize"]
    assert (op.capability, [a.name for a in op.arguments]) == ("decode", ["model", "ids", "strip"])
    assert op.bind((MODEL, (5, 6)), {}) == {"model": MODEL, "ids": (5, 6), "strip": False}
    assert wire.request_fields(op, op.bind((MODEL, (5, 6)), {"strip": True}))["ids"] == [5, 6]
    assert table.capabilities == CAPABILITIES  # no new capability: decode covers it
    assert "| `detokenize` | `decode` | `model`, `ids`, `strip` (optional) | text |" in schema.op_table(table)
    assert "detokenize" not in schema.op_table()  # the shipped table is the shipped schemas'


def test_capabilities_and_ops_are_computed_once_per_class_or_declared() -> None:
    assert ToyEngine.implemented == frozenset(OPS)
    assert ToyWithoutRenderTemplate.implemented == frozenset(OPS) - {"render_template"}
    assert ToyWithoutRenderTemplate().capabilities == frozenset(CAPABILITIES)
    assert "render_template" not in ToyWithoutRenderTemplate().ops

    class Declared(ToyEngine):
        capabilities = frozenset({"encode", "render"})

    assert Declared().ops == {"encode", "render", "render_template"}


def test_the_cmd_client_has_one_request_path() -> None:
    """No op method of its own: every one is the generic forwarder to ``request``."""
    assert not set(vars(CmdEngine)) & set(OPS)
    forwarders = {getattr(CmdEngine, op).__qualname__ for op in OPS}
    assert forwarders == set(OPS) and CmdEngine.implemented == frozenset(OPS)


def class_assignments(root: Path, base: Path = ROOT) -> list[str]:
    """Every ``x.__class__ = …`` (or ``setattr(x, "__class__", …)``) under ``root``, as ``file:line`` from ``base``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            targets = node.targets if isinstance(node, ast.Assign) else []
            if isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                targets = [node.target]
            swapped = any(isinstance(t, ast.Attribute) and t.attr == "__class__" for t in targets)
            swapped |= (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", None) == "setattr"
                and len(node.args) > 1
                and getattr(node.args[1], "value", None) == "__class__"
            )
            if swapped:
                found.append(f"{path.relative_to(base)}:{node.lineno}")
    return found


def test_no_object_changes_its_class() -> None:
    swaps = [line for layer in ("impl", "specgate", "oracle") for line in class_assignments(ROOT / layer)]
    assert not swaps, "__class__ assigned at:\n" + "\n".join(swaps)


def test_the_class_assignment_finder_sees_one(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("class A: pass\nclass B: pass\nx = A()\nx.__class__ = B\n")
    (tmp_path / "b.py").write_text("setattr(object(), '__class__', int)\n")
    (tmp_path / "c.py").write_text("y = type(object()).__class__\n")
    assert class_assignments(tmp_path, tmp_path) == ["a.py:4", "b.py:1"]
