"""The ``cmd`` adapter against real external processes speaking PROTOCOL.md.

The engine is ``tests/engines/fault_engine.py`` (a subprocess, not a mock): its
``toy`` adapter exercises every op and value kind without a model, and its fault
switches make it crash, hang, answer garbage or answer with the wrong id.
"""

from __future__ import annotations

import math
import os
import shlex
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from impl.named_logprobs import NamedLogprobs
from impl.process.client import CmdEngine
from impl.protocol import CAPABILITIES, EngineError, ModelRef, Unsupported
from specgate.checks import render as render_check
from specgate.outcomes.gate import NotApplicable

FAULT_ENGINE = Path(__file__).with_name("fault_engine.py")
MODEL = ModelRef(
    "toy-model", Path("/nonexistent/toy.gguf"), "ab" * 32, tokenizer_json=Path("/x/tokenizer.json")
)


def toy_command(*extra: str) -> str:
    return shlex.join([sys.executable, str(FAULT_ENGINE), "toy", *extra])


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch):
    def make(fault: str = "", at: int = 1, timeout: float = 20.0, once: Path | None = None) -> CmdEngine:
        monkeypatch.setenv("SPECGATE_FAULT", fault)
        monkeypatch.setenv("SPECGATE_FAULT_AT", str(at))
        if once is not None:
            monkeypatch.setenv("SPECGATE_FAULT_ONCE", str(once))
        engine = CmdEngine(toy_command(), timeout=timeout)
        engine.logits_top_k = int(
            os.environ.get("SPECGATE_CMD_LOGITS_TOP_K", "0")
        )  # the full array by default
        made.append(engine)
        return engine

    made: list[CmdEngine] = []
    yield make
    for engine in made:
        engine.close()


def test_handshake_names_engine_and_capabilities(toy) -> None:
    engine = toy()
    assert engine.capabilities == frozenset(CAPABILITIES)
    assert engine.version() == "toy 1.0"
    assert engine.name == "cmd" and engine.label == "cmd:toy"


def test_an_engine_without_render_template_mirrors_it() -> None:
    """The handshake's ``ops`` says so (the class stays ``CmdEngine``), and the construct
    gate reads it as n/a while the model's own templates are still rendered."""
    engine = CmdEngine(shlex.join([sys.executable, str(FAULT_ENGINE), "toy-own-templates"]))
    try:
        assert "render" in engine.capabilities
        assert "render" in engine.ops and "render_template" not in engine.ops
        assert type(engine) is CmdEngine
        with pytest.raises(NotApplicable, match="renders only its models' own templates"):
            render_check.answer(engine, {"output": "1"}, "{{x}}", {"x": 1}, method="render_template")
        said = render_check.answer(engine, {}, MODEL, [{"role": "user", "content": "x"}])
        assert said == ("<user>x\n<assistant>{}", "")
        assert (
            engine.render(MODEL, [{"role": "user", "content": "x"}], add_generation_prompt=False)
            == "<user>x\n{}"
        )
        with pytest.raises(Unsupported, match="does not offer 'render_template'"):
            engine.request("render_template", template="{{x}}", context={"x": 1})
    finally:
        engine.close()


def test_every_op_round_trips_its_values(toy) -> None:
    engine = toy()
    meta = engine.metadata(MODEL)
    assert meta == {
        "model": "toy-model",
        "sha256": "ab" * 32,
        "tokenizer_json": "/x/tokenizer.json",
        "numbers": {1: "one", 2: "two"},
        "scale": 0.5,
    }
    msgs = [{"role": "user", "content": "héllo\n<|im_end|>"}]
    assert engine.render(MODEL, msgs, add_generation_prompt=True, enable_thinking=False) == (
        '<user>héllo\n<|im_end|>\n<assistant>{"enable_thinking": false}'
    )
    assert engine.render_template("a{{x}}b", {"x": [1, 2]}) == "a[1, 2]b"
    assert engine.split(MODEL, "a  b") == ["a", "", "b"]
    assert engine.encode(MODEL, "日本\x00", parse_special=True) == list("日本\x00".encode())
    assert engine.decode(MODEL, [0xE6, 0x97]) == b"\xe6\x97"  # an incomplete UTF-8 sequence survives
    # NaN and -Infinity travel (PROTOCOL.md section 5), but logits holding them are
    # malformed (section 8): an error naming the field, never a fail.
    with pytest.raises(EngineError, match=r"logits\[0\]\[1\] is .*nan.*logits must be finite"):
        engine.logits(MODEL, [5, 6, 7])
    sampled = engine.sample(np.array([0.1, 3.0, -1.0], dtype=np.float32), {"top_k": 2, "top_p": 0.9}, 0.25)
    assert sampled == {
        "steps": [{"step": "top_k", "ids": [1], "probs": [1.0]}],
        "ids": [1],
        "probs": [1.0],
        "token": 1,
        "chain": ["r=0.25", "top_k", "top_p"],
    }
    assert engine.generate(MODEL, [1, 2], {"max_tokens": 3}) == {
        "ids": [1, 2, 0],
        "bytes": "e4bd",
        "chunks": [],
        "finish_reason": "length",
    }
    assert engine.starts == 2  # one process served all of it, restarted after the malformed logits


def test_logits_travel_as_top_k_with_the_log_sum_exp(toy, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECGATE_CMD_LOGITS_TOP_K", "3")
    engine = toy()
    full = np.arange(8)[None, :] * 0.5 + np.arange(2)[:, None]  # what the toy computes for ids [1, 2]
    got = engine.logits(MODEL, [1, 2]).astype(np.float64)
    assert got.shape == (2, 8)
    np.testing.assert_array_equal(got[:, 5:], full[:, 5:])  # the top-3 logits exactly
    lse = np.log(np.exp(full).sum(axis=1))
    np.testing.assert_allclose(np.log(np.exp(got).sum(axis=1)), lse, rtol=1e-6)  # the engine's normalizer
    np.testing.assert_allclose(got[:, 5:] - lse[:, None], full[:, 5:] - lse[:, None], atol=1e-6)  # log-probs
    assert (got[:, :5] < got[:, 5:6]).all()  # the tail stays below the top-k


def test_reported_errors_keep_the_engine_running(toy) -> None:
    engine = toy()
    with pytest.raises(Unsupported, match="refuses the word"):
        engine.encode(MODEL, "refuse", parse_special=False)
    with pytest.raises(EngineError, match="RuntimeError: toy exploded"):
        engine.encode(MODEL, "boom", parse_special=False)
    with pytest.raises(EngineError, match=r"^cmd:toy: tokenise: bad_request error: unknown op 'tokenise'"):
        engine.exchange("tokenise", {"text": "x"})
    with pytest.raises(
        EngineError,
        match=r"bad_request error: .*requests/encode.schema.json#/required at request: 'parse_special' is a required",
    ):
        engine.exchange("encode", {"model": {"id": "m", "gguf": "/m.gguf", "sha256": "0"}, "text": "x"})
    assert engine.encode(MODEL, "ok", parse_special=False) == [111, 107]
    assert engine.starts == 1


@pytest.mark.parametrize(
    ("fault", "symptom"),
    [
        (
            "die",
            r"(?s)exited .* before answering request 2 \(encode\) \(exit status 3\).*stderr.*injecting 'die'",
        ),
        ("garbage", r"malformed JSON in answer to request 2"),
        ("wrong-id", r"answer carries id 1002, expected 2"),
    ],
)
def test_broken_answer_is_an_error_then_the_engine_restarts(
    toy, tmp_path: Path, fault: str, symptom: str
) -> None:
    engine = toy(fault=fault, at=2, once=tmp_path / "fired")
    assert engine.encode(MODEL, "a", parse_special=False) == [97]
    with pytest.raises(EngineError, match=symptom):
        engine.encode(MODEL, "b", parse_special=False)
    assert engine.encode(MODEL, "c", parse_special=False) == [99]  # a fresh process answers
    assert engine.starts == 2


@pytest.mark.parametrize(("fault", "at", "said"), [("bool-id", 1, "True"), ("float-id", 2, "2.0")])
def test_an_id_that_only_equals_the_requests_is_refused(
    toy, tmp_path: Path, fault: str, at: int, said: str
) -> None:
    """``true == 1`` and ``2.0 == 2`` in Python; the request id must be that integer (issue 38)."""
    engine = toy(fault=fault, at=at, once=tmp_path / "fired")
    for n in range(1, at):
        assert engine.encode(MODEL, "a", parse_special=False) == [97], n
    with pytest.raises(EngineError, match=rf"answer carries id {said}, expected {at}"):
        engine.encode(MODEL, "a", parse_special=False)


def test_hang_past_the_timeout_is_an_error_and_is_killed(toy, tmp_path: Path) -> None:
    engine = toy(fault="hang", at=1, timeout=5, once=tmp_path / "fired")  # the toy answers in ms
    engine.capabilities  # noqa: B018 — started outside the window: its start-up is the machine's load
    t0 = time.monotonic()
    with pytest.raises(EngineError, match=r"no answer to request 1 \(encode\) within 5 s"):
        engine.encode(MODEL, "a", parse_special=False)
    assert time.monotonic() - t0 < 60  # the engine hangs forever: a ceiling 12x the deadline shows the kill
    assert engine.encode(MODEL, "b", parse_special=False) == [98]
    assert engine.starts == 2


def test_engine_that_cannot_start_is_an_error_not_a_traceback(tmp_path: Path) -> None:
    engine = CmdEngine(f"{tmp_path}/no-such-engine --flag")
    with pytest.raises(EngineError, match="cannot start"):
        engine.capabilities  # noqa: B018
    silent = CmdEngine(
        shlex.join([sys.executable, "-c", "import sys; print('hello, not json'); sys.exit(4)"])
    )
    with pytest.raises(EngineError, match="malformed handshake"):
        silent.capabilities  # noqa: B018
    for _ in range(2):
        with pytest.raises(EngineError):
            silent.capabilities  # noqa: B018
    with pytest.raises(EngineError, match="gave up after 3 failed start-ups"):
        silent.capabilities  # noqa: B018
    assert silent.starts == 3


def test_timeout_setting_is_validated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECGATE_CMD_TIMEOUT", "soon")
    with pytest.raises(EngineError, match="SPECGATE_CMD_TIMEOUT='soon' is not a number"):
        CmdEngine("true")
    monkeypatch.setenv("SPECGATE_CMD_TIMEOUT", "7")
    assert CmdEngine("true").timeout == 7.0


@pytest.mark.parametrize(
    ("spoken", "named"),
    [("specgate-jsonl/2", "names protocol 'specgate-jsonl/2'"), ("", "names no protocol")],
)
def test_a_handshake_naming_another_protocol_is_refused_for_the_session(
    toy, monkeypatch: pytest.MonkeyPatch, spoken: str, named: str
) -> None:
    monkeypatch.setenv("SPECGATE_FAULT_PROTOCOL", spoken)
    engine = toy(fault="protocol")
    expected = f"the engine's handshake {named}; specgate speaks 'specgate-jsonl/1'"
    for _ in range(2):  # refused again at once: no restart can change the version it speaks
        with pytest.raises(EngineError) as refused:
            engine.encode(MODEL, "a", parse_special=False)
        assert expected in str(refused.value) and "\n" not in str(refused.value), str(refused.value)
    assert engine.starts == 1


def test_a_result_of_the_wrong_shape_is_an_error_then_the_engine_restarts(toy, tmp_path: Path) -> None:
    engine = toy(fault="wrong-shape", at=2, once=tmp_path / "fired")
    assert engine.encode(MODEL, "a", parse_special=False) == [97]
    with pytest.raises(
        EngineError, match=r"results/encode\.schema\.json#/type at result: 'a string, not a list'"
    ):
        engine.encode(MODEL, "b", parse_special=False)
    assert engine.encode(MODEL, "c", parse_special=False) == [99]  # PROTOCOL.md section 6: a fresh process
    assert engine.starts == 2


def test_the_line_bound_is_a_setting(toy, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SPECGATE_CMD_MAX_LINE_BYTES", str(1 << 20))
    engine = toy(fault="endless-line", at=1, once=tmp_path / "fired")
    with pytest.raises(EngineError, match=r"request 1 \(encode\) is a line longer than 1048576 bytes"):
        engine.encode(MODEL, "a", parse_special=False)
    assert engine.encode(MODEL, "b", parse_special=False) == [98]
    monkeypatch.setenv("SPECGATE_CMD_MAX_LINE_BYTES", "1e9")
    with pytest.raises(
        EngineError, match=r"SPECGATE_CMD_MAX_LINE_BYTES='1e9' must be a positive whole number"
    ):
        CmdEngine("true")


def test_full_logits_arrays_raise_the_default_line_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """A full float32 array for a 512-token prompt over Qwen's vocabulary is 415 MB of
    base64: past the 256 MiB default, within the full-array default."""
    full_answer = math.ceil(512 * 151936 * 4 / 3) * 4
    assert CmdEngine("true").max_line_bytes < full_answer
    monkeypatch.setenv("SPECGATE_CMD_LOGITS_TOP_K", "0")
    assert CmdEngine("true").max_line_bytes > full_answer


def test_each_layer_says_its_part_of_a_message_once(toy) -> None:
    """Issue 35: "engine reported engine: cmd:…: decode: …" and "cmd refuses this encode
    input: cmd:…" said the engine twice. The client names the engine and the op, the gate
    the refusal: each once."""
    from specgate.outcomes.gate import Refused, call

    engine = toy()
    with pytest.raises(Refused) as refused:
        call(engine, "encode", MODEL, "refuse", False)
    assert refused.value.msg == "cmd:toy refuses this encode input: toy refuses the word 'refuse'"
    with pytest.raises(EngineError) as failed:
        call(engine, "encode", MODEL, "boom", False)
    assert str(failed.value) == "cmd:toy: encode: engine error: RuntimeError: toy exploded"


#: An engine that supports one model, says so in its handshake (``models``), and dies if it
#: is ever asked about another.
ONE_MODEL_ENGINE = """
import json, sys
print(json.dumps({"protocol": "specgate-jsonl/1", "engine": "one", "version": "1",
                  "capabilities": ["encode"], "models": ["toy-model", "%s"]}), flush=True)
for line in sys.stdin:
    request = json.loads(line)
    if request.get("op") == "shutdown":
        break
    if request["model"]["id"] != "toy-model":
        sys.exit("asked about a model it does not support")
    print(json.dumps({"id": request["id"], "result": [1]}), flush=True)
"""


def test_the_models_a_handshake_lists_are_the_only_ones_asked_about(tmp_path: Path) -> None:
    from specgate.outcomes.gate import call

    script = tmp_path / "one_model.py"
    script.write_text(ONE_MODEL_ENGINE % ("cd" * 32), encoding="utf-8")
    engine = CmdEngine(shlex.join([sys.executable, str(script)]), timeout=20)
    try:
        assert call(engine, "encode", MODEL, "x", False) == [1]
        other = ModelRef("other-model", Path("/nonexistent/other.gguf"), "ef" * 32)
        with pytest.raises(NotApplicable) as na:
            call(engine, "encode", other, "x", False)
        assert "cmd:one supports only the models its handshake lists (toy-model, " in na.value.msg
        assert "other-model is not among them" in na.value.msg
        by_sha = ModelRef("renamed", Path("/nonexistent/r.gguf"), "cd" * 32)  # listed by its sha256
        with pytest.raises(EngineError, match="asked about a model it does not support"):
            call(engine, "encode", by_sha, "x", False)
        assert engine.starts == 1  # the other model was never asked (it would have died); the sha256 was
    finally:
        engine.close()


def test_session_ops_travel_the_wire_with_the_session_s_model_sizing_the_answer(toy) -> None:
    """session_open's id comes back, session_append's one row of logits arrives as a row
    (full or top-k form), truncate and close answer their values; a session the engine
    does not know is its error, no restart."""
    for top_k in (0, 4):
        engine = toy()
        engine.logits_top_k = top_k
        assert "session" in engine.capabilities and {"session_open", "session_close"} <= engine.ops
        sid = engine.session_open(MODEL)
        assert sid == "toy0"
        engine.session_append(sid, [3, 4])
        answer = engine.session_append(sid, [9])
        assert answer["n_past"] == 3 and answer["logits"].shape == (8,)
        assert (
            int(np.argmax(answer["logits"])) == 1 and answer["logits"][1] == 9.0
        )  # the last id, not the first
        assert engine.session_truncate(sid, 1) == 1
        assert engine.session_append(sid, [7])["n_past"] == 2
        assert engine.session_close(sid) is None
        with pytest.raises(EngineError, match="KeyError"):
            engine.session_append(sid, [1])
        assert engine.starts == 1
        if top_k == 0:  # a NaN in the row is a broken answer (the top-k form cannot carry one)
            with pytest.raises(EngineError, match=r"logits\[0\]\[2\] is .*nan.*must be finite"):
                engine.session_append(engine.session_open(MODEL), [5])


def test_conversation_ops_travel_the_wire_the_ids_and_one_row_back(toy) -> None:
    """conversation_open's id comes back; conversation_turn sends its messages, system and
    keywords, and its ids and one row of logits arrive (full or top-k form)."""
    for top_k in (0, 4):
        engine = toy()
        engine.logits_top_k = top_k
        assert (
            "conversation" in engine.capabilities and {"conversation_open", "conversation_turn"} <= engine.ops
        )
        cid = engine.conversation_open(MODEL, {"enable_thinking": False})
        answer = engine.conversation_turn(cid, [{"role": "user", "content": "hello"}])
        assert answer["ids"] == [5] and answer["logits"].shape == (8,) and answer["logits"][0] == 1.0
        answer = engine.conversation_turn(cid, [{"role": "assistant", "content": "hi"}], "sys", {"x": 1})
        assert answer["ids"] == [5, 2] and answer["logits"][1] == 2.0
        assert engine.conversation_close(cid) is None
        assert engine.starts == 1


#: An engine whose logits name two candidates at the last position only (the top-k form with
#: ``unnamed``, PROTOCOL.md 4.3, as the mistral.rs adapter answers); one row too many when
#: the prompt starts with 9.
NAMED_LOGITS_ENGINE = """import base64, json, struct, sys
print(json.dumps({"protocol": "specgate-jsonl/1", "engine": "named", "version": "1",
                  "capabilities": ["logits"]}), flush=True)
def packed(dtype, code, shape, values):
    data = struct.pack("<%d%s" % (len(values), code), *values)
    return {"$array": {"dtype": dtype, "shape": shape, "b64": base64.b64encode(data).decode()}}
for line in sys.stdin:
    request = json.loads(line)
    if request["op"] == "shutdown":
        break
    n = len(request["ids"]) + (request["ids"][0] == 9)
    top = {"n_vocab": 8, "ids": packed("int32", "i", [n, 2], [-1, -1] * (n - 1) + [3, 7]),
           "logits": packed("float32", "f", [n, 2], [0.0, 0.0] * (n - 1) + [-0.5, -2.0]),
           "lse": packed("float64", "d", [n], [0.0] * n), "unnamed": "the last position only"}
    print(json.dumps({"id": request["id"], "result": {"top_k": top}}), flush=True)
"""


def test_logits_naming_only_some_candidates_arrive_as_named_log_probs(tmp_path: Path) -> None:
    script = tmp_path / "named.py"
    script.write_text(NAMED_LOGITS_ENGINE, encoding="utf-8")
    engine = CmdEngine(shlex.join([sys.executable, str(script)]), timeout=20.0)
    try:
        got = engine.logits(MODEL, [1, 2, 3])
        assert isinstance(got, NamedLogprobs) and got.unnamed == "the last position only"
        assert got.row(0) == got.row(1) == {} and got.row(2) == {3: -0.5, 7: -2.0}
        with pytest.raises(EngineError, match=r"answer field logits has 4 rows; expected 3 \(one per id\)"):
            engine.logits(MODEL, [9, 2, 3])
    finally:
        engine.close()
