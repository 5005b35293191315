"""A session row that names only some candidates (llama-cpp-python's server: its top-k,
by text) is judged as the logits stage judges named answers (``specgate.checks.state``
over ``specgate.checks.logit_named``): on the ids it names, nothing claimed about the rest.

The case that made this necessary, on the 0.5B's committed snapshot: turn 3 of
``03_system_prompt_changes``, a flat distribution (its top-64 hold 0.875 of the mass).
Near the 64th candidate the reference and llama.cpp order near-equal tails differently;
spread over the vocabulary, llama.cpp's own top-64 (the server's answer, equal to
llama.cpp in process) made the reference's tail ids "improbable" and failed the turn with
KL 0.0304 > 0.02, where the full row is KL 0.0014. No model and no server: the rows are
built from the snapshot's records; the last two tests serve them from a fake
llama-cpp-python server on loopback (names by text, as the real one spells them).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from impl.http import vocab
from impl.http.engine import HttpEngine, _spread
from impl.named_logprobs import NamedLogprobs
from specgate.checks import state
from specgate.plugin import model_missing
from specgate.supply import models as model_cache
from tests.engines.loopback import LlamaCppPythonHandler, serving
from tests.engines.parity_run import ROOT

MODEL_ID = "qwen2.5-coder-0.5b-instruct"
N_VOCAB = 151936


@pytest.fixture(scope="module")
def turns() -> list[dict[str, Any]]:
    path = ROOT / "snapshots" / MODEL_ID / "state_conversation.json"
    return json.loads(path.read_text(encoding="utf-8"))["cases"]["03_system_prompt_changes"]["turns"]


def top(turn: dict[str, Any]) -> dict[int, float]:
    ref = turn["reference"]
    return dict(
        zip(map(int, ref["top_ids"][0].split()), map(float, ref["top_logprobs"][0].split()), strict=True)
    )


def reordered_tail(row: dict[int, float], n: int = 6) -> dict[int, float]:
    """``row``'s top-k with its last ``n`` candidates swapped for ids it does not rank (at
    the same values): the same distribution up to near-ties past the k-th candidate."""
    ranked = sorted(row.items(), key=lambda kv: -kv[1])
    outside = [i for i in range(1000, N_VOCAB) if i not in row][:n]
    return dict(ranked[:-n] + [(i, v) for i, (_, v) in zip(outside, ranked[-n:], strict=True)])


def test_a_named_row_whose_tail_the_reference_orders_otherwise_passes_where_a_spread_one_fails(turns) -> None:
    turn = turns[2]
    got = reordered_tail(top(turn))
    named = NamedLogprobs.from_rows([got], N_VOCAB, "the server names only its top-k")
    failure, cmp = state.judge_row("quantized", MODEL_ID, turn["ids"], turn["reference"], named)
    assert failure is None and cmp.kl_mean < 1e-3, (failure, cmp.kl_mean)
    spread_failure, spread = state.judge_row(
        "quantized", MODEL_ID, turn["ids"], turn["reference"], _spread(got, N_VOCAB)
    )
    assert spread_failure is not None and spread.kl_mean > 0.02  # the artifact the named row avoids


def test_a_named_row_of_another_turn_fails(turns) -> None:
    # turn 2's distribution (the pirate's "the time") answered at turn 3 (the butler's "greet me again")
    named = NamedLogprobs.from_rows([top(turns[1])], N_VOCAB, "the server names only its top-k")
    failure, _ = state.judge_row("quantized", MODEL_ID, turns[2]["ids"], turns[2]["reference"], named)
    assert failure is not None and "mean KL" in failure, failure


def test_a_named_row_that_names_nothing_judgeable_is_refused_never_passed(turns) -> None:
    # only ids the reference does not rank, the unnamed remainder above them: no KL, no top-1
    nothing = NamedLogprobs.from_rows([{5: -3.0, 6: -4.0}], N_VOCAB, "'' ×3")
    case = {"turns": turns}
    played = state.Played(rows=[nothing] * 3, held=[None] * 3)
    assert state.judge_conversation("quantized", MODEL_ID, case, played) is None
    assert (reason := state.unjudged("quantized", MODEL_ID, case, played)) is not None
    assert reason.startswith("turn 1: no position can be judged"), reason


def test_a_named_row_with_too_much_mass_is_the_engines_fault(turns) -> None:
    bad = NamedLogprobs.from_rows([{1: -0.1, 2: -0.2}], N_VOCAB, "x")  # 0.90 + 0.82 > 1
    failure, cmp = state.judge_row("quantized", MODEL_ID, turns[0]["ids"], turns[0]["reference"], bad)
    assert cmp is None and "sum to" in failure, failure
    assert state.measured("quantized", MODEL_ID, {"turns": turns[:1]}, state.Played([bad], [None])) == {}


class KeepsIds(HttpEngine):
    """A planted mistake: session_truncate answers n and keeps every id."""

    def session_truncate(self, session: str, n: int) -> int:
        self._held(session)
        return n


def renders(turns: list[dict[str, Any]], truncates: bool) -> list[list[int]]:
    """The whole session's ids each append sends, played as ``state.play_conversation`` does."""
    held, sent = [], []
    for t in turns:
        if truncates and t["keep"] < len(held):
            held = held[: t["keep"]]
        held = held + t["ids"][t["keep"] :]
        sent.append(held)
    return sent


@pytest.fixture(scope="module")
def fake_server(turns) -> Iterator[tuple[str, Any]]:
    """llama-cpp-python's server as the state gate meets it: each turn's render answered with
    the reference's own top-64 (a perfect engine), spelled by text; any other prompt (a stale
    session's) with turn 1's (what a server would not say there)."""
    try:
        ref = model_cache.model_ref(MODEL_ID)
    except model_cache.ModelError as exc:
        model_missing(str(exc))
    texts, spelled = vocab.texts(ref.gguf), vocab.pieces(ref.gguf, controls=True)
    ids_of = {
        b"".join(spelled[i] for i in ids).decode("utf-8"): ids
        for ids in renders(turns, True) + renders(turns, False)
    }
    rows = {tuple(t["ids"]): top(t) for t in turns}

    class Fake(LlamaCppPythonHandler):
        paths = ("/extras/tokenize", "/v1/completions")
        model = str(ref.gguf)

        def post(self, body: dict[str, Any]) -> Any:
            ids = ids_of[body.get("input", body.get("prompt"))]
            if self.path == "/extras/tokenize":
                return {"tokens": ids}
            row = rows.get(tuple(ids), rows[tuple(turns[0]["ids"])])
            named = {
                texts[i]: v for i, v in sorted(row.items(), key=lambda kv: kv[1])
            }  # shared texts: the best wins
            return {
                "choices": [{"text": "", "finish_reason": "length", "logprobs": {"top_logprobs": [named]}}],
                "usage": {"prompt_tokens": len(ids)},
            }

    with serving(Fake) as url:
        yield url, ref


@pytest.mark.parametrize("engine_class", [HttpEngine, KeepsIds], ids=["right", "truncate-keeps-ids"])
def test_the_http_session_passes_right_and_fails_when_its_truncate_keeps_the_ids(
    fake_server, turns, engine_class: type[HttpEngine]
) -> None:
    url, model = fake_server
    case = {"turns": turns}
    played = state.play_conversation(engine_class(url), model, case)
    failure = state.judge_conversation("quantized", MODEL_ID, case, played)
    if engine_class is HttpEngine:
        assert failure is None and state.unjudged("quantized", MODEL_ID, case, played) is None
        assert state.measured("quantized", MODEL_ID, case, played)["kl_mean"] < 1e-6
    else:
        assert failure is not None and failure.startswith("turn 3: the engine kept 37 KV tokens"), failure
        assert "(the session holds 103 tokens, the new render has 66)" in failure, failure
