"""The protocol as schemas (``protocol/``): the files are valid JSON Schemas, PROTOCOL.md
and the ``cmd``/``serve`` tables agree with them, the oracle's answers follow them,
and a wrong-shaped answer is an error naming the schema path, after which the
engine is restarted.
"""

from __future__ import annotations

import io
import json
import re
import shlex
import sys
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from impl import bounds
from impl.ops import OPS, PROTOCOL_DIR
from impl.oracle import OracleEngine
from impl.process import schema, wire
from impl.process.client import CmdEngine
from impl.process.server import handle, serve
from impl.protocol import CAPABILITIES, EngineError, ModelRef
from tests.engines.fault_engine import ToyEngine

ROOT = Path(__file__).resolve().parents[2]
PROTOCOL_MD = ROOT / "PROTOCOL.md"
MISSHAPEN_ENGINE = Path(__file__).with_name("misshapen_engine.py")
TOY_MODEL = ModelRef("toy-model", Path("/nonexistent/toy.gguf"), "ab" * 32)


def schema_files() -> list[str]:
    return sorted(p.relative_to(PROTOCOL_DIR).as_posix() for p in PROTOCOL_DIR.rglob("*.json"))


@pytest.mark.parametrize("name", schema_files())
def test_every_file_is_a_valid_draft_2020_12_schema(name: str) -> None:
    jsonschema.Draft202012Validator.check_schema(schema.schema(name))


# --- PROTOCOL.md and the code's tables agree with the schemas -----------------------------


def doc_op_rows() -> dict[str, tuple[str, list[str], list[str]]]:
    """op -> (capability, required fields, optional fields) as PROTOCOL.md's op table lists them."""
    text = schema.marked_sections(PROTOCOL_MD.read_text(encoding="utf-8"))["ops"]
    rows = {}
    for line in text.splitlines()[2:]:
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        op, capability, fields = cells[0].strip("`"), cells[1].strip("`"), cells[2]
        parts = [f.strip() for f in fields.split(",")]
        required = [p.strip("`") for p in parts if not p.endswith("(optional)")]
        optional = [
            p.removesuffix("(optional)").strip().strip("`") for p in parts if p.endswith("(optional)")
        ]
        rows[op] = (capability, required, optional)
    return rows


def test_protocol_md_op_table_lists_exactly_the_ops_with_request_and_result_schemas() -> None:
    documented = set(doc_op_rows())
    requests = {
        n.split("/")[1].removesuffix(".schema.json") for n in schema_files() if n.startswith("requests/")
    }
    results = {
        n.split("/")[1].removesuffix(".schema.json") for n in schema_files() if n.startswith("results/")
    }
    assert documented == requests, (
        f"ops in PROTOCOL.md without a request schema, or the reverse: {documented ^ requests}"
    )
    assert documented == results, (
        f"ops in PROTOCOL.md without a result schema, or the reverse: {documented ^ results}"
    )
    assert documented == set(OPS), f"PROTOCOL.md's ops and impl.ops.OPS differ: {documented ^ set(OPS)}"


@pytest.mark.parametrize("op", sorted(OPS))
def test_protocol_md_request_fields_match_the_schema(op: str) -> None:
    capability, required, optional = doc_op_rows()[op]
    request = schema.schema(f"requests/{op}.schema.json")
    assert capability == request["x-capability"] == OPS[op].capability
    assert required == [f for f in request["required"] if f not in ("id", "op")], f"{op}: required fields"
    assert sorted(required + optional) == sorted(f for f in request["properties"] if f not in ("id", "op"))


def test_protocol_md_tables_are_the_generated_ones() -> None:
    """Regenerate with ``python -m impl.process.schema --write PROTOCOL.md``."""
    sections = schema.marked_sections(PROTOCOL_MD.read_text(encoding="utf-8"))
    for name, table in schema.generated_tables().items():
        assert sections.get(name) == table, (
            f"PROTOCOL.md's {name!r} table is stale; run python -m impl.process.schema --write PROTOCOL.md"
        )


def test_required_result_keys_are_what_the_gates_read() -> None:
    """The sample and generate gates read these keys of every engine's answer."""
    assert schema.schema("results/sample.schema.json")["required"] == ["steps", "ids", "probs"]
    assert schema.schema("results/generate.schema.json")["required"] == ["ids", "bytes", "finish_reason"]


def test_served_handshake_follows_the_schema() -> None:
    out = io.StringIO()
    assert serve(ToyEngine(), stdin=iter([]), stdout=out) == 0
    hello = json.loads(out.getvalue().splitlines()[0])
    assert schema.problem("handshake.schema.json", hello) is None
    assert set(hello["capabilities"]) == set(CAPABILITIES)
    bad = {**hello, "classes": ["exact", "fast"]}
    assert "handshake.schema.json#/properties/classes/items/enum" in schema.problem(
        "handshake.schema.json", bad
    )


def test_a_model_carries_what_it_holds_across_the_wire() -> None:
    """An engine behind ``specgate engine`` picks weights and loaders from the model
    object, as an in-process adapter does: ``weights`` and ``loader`` travel, follow the
    schema, and a model from an older client (without them) reads them from its role."""
    tiny = ModelRef("any-name", Path("/models/t.gguf"), "ab" * 32, role="full-weights", loader="dequantized")
    user = ModelRef("mine", Path("/models/u.gguf"), "cd" * 32, role="user", weights=True)
    for model in (tiny, user, TOY_MODEL):
        sent = wire.model_to_wire(model)
        assert schema.problem("model.schema.json", sent) is None
        back = wire.model_from_wire(sent)
        assert (back.weights, back.loader) == (model.weights, model.loader)
    assert (tiny.weights, user.weights, user.loader) == (True, True, "transformers")
    old_client = {"id": "v", "gguf": "/models/v.gguf", "sha256": "ef" * 32, "role": "vocab-only"}
    assert (wire.model_from_wire(old_client).weights, wire.model_from_wire(old_client).loader) == (
        False,
        "transformers",
    )
    with pytest.raises(wire.WireError, match="a model's 'weights' must be a bool"):
        wire.model_from_wire({**old_client, "weights": "yes"})
    with pytest.raises(ValueError, match="loader 'fast' is not one of transformers, dequantized"):
        ModelRef("x", Path("/x.gguf"), "0" * 64, loader="fast")


# --- the oracle's answers follow the schemas ------------------------------------------------


def test_oracle_sample_and_generate_results_follow_their_schemas() -> None:
    """Real oracle results (sampler chain, greedy and sampled; the decode loop on
    crafted logits ending by stop token, stop string and length)."""
    from oracle import decode_loop

    oracle = OracleEngine()
    logits = np.array([1.0, 3.0, -np.inf, 2.5, 0.0], dtype=np.float32)
    for params in ({}, {"temperature": 0.0}, {"top_k": 2, "min_p": 0.1, "window": [1, 1, 3]}):
        encoded = wire.encode_value(oracle.sample(logits, params, 0.3))
        assert schema.result_problem("sample", encoded) is None

    class Crafted:  # the hot id of each position follows ``sequence``; token 0 is the stop token
        def __init__(self, sequence: list[int]) -> None:
            self.sequence, self.n = sequence, 0

        def row(self) -> np.ndarray:
            row = np.zeros(4, dtype=np.float32)
            row[self.sequence[min(self.n, len(self.sequence) - 1)]] = 5.0
            self.n += 1
            return row

        def prefill(self, ids: list[int]) -> np.ndarray:
            rows = np.zeros((len(ids), 4), dtype=np.float32)
            rows[-1] = self.row()
            return rows

        def step(self, token: int) -> np.ndarray:
            return self.row()

    pieces = {1: b"a", 2: "é".encode()[:1], 3: "é".encode()[1:]}
    greedy = {"temperature": 0.0, "repeat_penalty": 1.0}
    runs = [
        ([1, 0], {**greedy, "max_tokens": 5}, "stop_token"),
        ([1, 2, 3, 1], {**greedy, "max_tokens": 5, "stop": ["éa"]}, "stop_string"),
        ([2, 3, 1], {**greedy, "max_tokens": 2}, "length"),
    ]
    for sequence, params, reason in runs:
        result = decode_loop.generate(Crafted(sequence), pieces.__getitem__, [1], params, stop_tokens=[0])
        assert result["finish_reason"] == reason
        assert schema.result_problem("generate", wire.encode_value(result)) is None


# --- wrong shapes: an error naming the schema path, then a restart -----------------------------


@pytest.fixture
def misshapen():
    engine = CmdEngine(shlex.join([sys.executable, str(MISSHAPEN_ENGINE)]), timeout=20)
    yield engine
    engine.close()


def test_encode_answering_strings_is_an_error_naming_the_schema_path_then_a_restart(misshapen) -> None:
    assert misshapen.encode(TOY_MODEL, "ok", parse_special=False) == [111, 107]
    with pytest.raises(EngineError) as caught:
        misshapen.encode(TOY_MODEL, "strings", parse_special=False)
    message = str(caught.value)
    assert "results/encode.schema.json#/" in message and "items" in message, message
    assert "result[0]: 's' is not of type 'integer'" in message, message
    assert misshapen.encode(TOY_MODEL, "ok", parse_special=False) == [111, 107]  # a fresh process
    assert misshapen.starts == 2


def test_generate_without_finish_reason_is_an_error_naming_the_schema_path_then_a_restart(misshapen) -> None:
    with pytest.raises(
        EngineError,
        match=r"results/generate\.schema\.json#/required at result: 'finish_reason' is a required property",
    ):
        misshapen.generate(TOY_MODEL, [1], {"max_tokens": 1})
    assert misshapen.encode(TOY_MODEL, "a", parse_special=False) == [97]
    assert misshapen.starts == 2


class _MisshapenToy(ToyEngine):
    def encode(self, model: ModelRef, text: str, parse_special: bool) -> Any:
        return list(text)

    def generate(self, model: ModelRef, ids: Any, params: dict[str, Any]) -> dict[str, Any]:
        return {"ids": list(ids), "bytes": b"a".hex(), "finish_reason": "eos"}


def test_specgate_engine_answers_a_wrong_shaped_result_as_an_engine_error() -> None:
    model = wire.model_to_wire(TOY_MODEL)
    response = handle(
        _MisshapenToy(), {"id": 3, "op": "encode", "model": model, "text": "hi", "parse_special": False}
    )
    assert response["id"] == 3 and response["error"]["type"] == "engine"
    assert re.search(
        r"results/encode\.schema\.json#/.*items.* at result\[0\]: 'h' is not of type 'integer'",
        response["error"]["message"],
    )
    response = handle(_MisshapenToy(), {"id": 4, "op": "generate", "model": model, "ids": [1], "params": {}})
    assert (
        "results/generate.schema.json#/properties/finish_reason/enum at result['finish_reason']: 'eos'"
        in (response["error"]["message"])
    )


class _FloodingToy(ToyEngine):
    def encode(self, model: ModelRef, text: str, parse_special: bool) -> Any:
        return list(range(5_000_000))  # an id per byte of "hi" is all a tokenizer can need


def test_an_answer_over_the_requests_bound_is_refused_before_it_is_encoded_or_validated(monkeypatch) -> None:
    """5 M ids for a 2-byte text: the engine's error at once, counted on the adapter's own
    value. Encoding and validating it first cost ~8 s a request (36 cases in 300 s)."""
    walked = []
    monkeypatch.setattr(wire, "encode_value", lambda value: walked.append("encode") or value)
    monkeypatch.setattr(schema, "result_problem", lambda op, value: walked.append("schema"))
    model = wire.model_to_wire(TOY_MODEL)
    request = {"id": 6, "op": "encode", "model": model, "text": "hi", "parse_special": False}
    response = handle(_FloodingToy(), request)
    most = bounds.answer_items("encode", {"text": "hi"}, None)
    assert response["error"] == {
        "type": "engine",
        "message": f"toy answered more than {most:,} JSON values, the most an answer to this encode "
        "request can need (impl.bounds)",
    }
    assert walked == []
    assert "result" in handle(ToyEngine(), {**request, "id": 7}) and walked == ["encode", "schema"]


_JSON = st.recursive(
    st.integers() | st.text("ab", max_size=3) | st.none(),
    lambda inner: (
        st.lists(inner, min_size=1, max_size=4)
        | st.dictionaries(st.text("xyz", min_size=1, max_size=2), inner, min_size=1, max_size=4)
    ),
    max_leaves=40,
)


@given(_JSON, st.integers(0, 60))
@example([1, 2, 3], 4).via("a flat list exactly at the bound")
@example({"x": [1, 2], "y": 3}, 4).via("one short")
def test_an_answers_values_are_counted_as_its_json_text_holds_them(value: Any, bound: int) -> None:
    """``bounds.value_items`` (the server's count of an adapter's value) against
    ``bounds.json_items`` (the client's count of the same value's JSON text): equal for values
    without empty containers, and never past ``bound + 1``."""
    count = bounds.json_items(json.dumps(value))
    assert bounds.value_items(value, 10**6) == count
    assert bounds.value_items(value, bound) == (count if count <= bound else bound + 1)


def test_specgate_engine_refuses_a_request_that_does_not_follow_its_schema() -> None:
    model = wire.model_to_wire(TOY_MODEL)
    response = handle(
        ToyEngine(), {"id": 5, "op": "encode", "model": model, "text": 7, "parse_special": False}
    )
    assert response["error"]["type"] == "bad_request"
    assert (
        "requests/encode.schema.json#/properties/text/type at request['text']: 7 is not of type 'string'"
        in (response["error"]["message"])
    )


# --- the oracle served by `specgate engine`, validated by the client on real requests ------------


def oracle_engine() -> CmdEngine:
    return CmdEngine(
        shlex.join([sys.executable, "-m", "specgate.cli", "engine", "--impl", "oracle"]), timeout=120
    )


def test_oracle_served_by_specgate_engine_follows_the_schemas_on_real_requests() -> None:
    """Every op the oracle answers on a real vocabulary, and the sampler on a real logit
    window, crosses the client's schema validation (a violation would raise and restart)."""
    from specgate.checks.sample import logits_of
    from specgate.plugin import model_missing
    from specgate.supply import models as model_cache

    if "qwen3-vocab" not in model_cache.cached_models():
        model_missing("qwen3-vocab; run: specgate models fetch")
    model = model_cache.model_ref("qwen3-vocab")
    engine = oracle_engine()
    try:
        meta = engine.metadata(model)
        assert meta["architecture"] == "qwen3"
        text = "Hello <|im_end|> 日本語 <think>x</think>"
        assert "".join(engine.split(model, text)) == text
        ids = engine.encode(model, text, parse_special=True)
        assert engine.decode(model, ids) == text.encode("utf-8")
        assert engine.decode(model, [ids[0], ids[-1] + 10**7]) == b"Hello"  # out-of-range id skipped
        messages = [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "ok", "reasoning": "r", "tool_calls": None},
        ]
        assert "<|im_start|>user\nhi" in engine.render(model, messages, add_generation_prompt=False)
        window = ROOT / "snapshots" / "qwen2.5-coder-0.5b-instruct" / "sample.json"  # a real logit window
        case = next(iter(json.loads(window.read_text(encoding="utf-8"))["cases"].values()))
        sampled = engine.sample(logits_of(case), case["params"], case["r"])
        assert sampled["ids"] and len(sampled["ids"]) == len(sampled["probs"])
        assert engine.starts == 1  # no answer was refused as wrong-shaped
    finally:
        engine.close()
