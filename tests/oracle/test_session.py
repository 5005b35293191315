"""The oracle's conversation mode (``oracle.session``, ``oracle.conversation``) on the
tiny models of both architectures: any chunking of a prompt gives the one-shot logits,
truncate then re-append equals fresh, and a conversation played turn by turn equals a
fresh render and prefill at every turn — within the exact class's tolerance. The
checks are in ``session_checks.py``, where ``test_session_mutations.py`` shows each
catching a planted state bug. Measured worst |Δlogit| (tiny f32 models, 2 cores):
1.2e-5 chunking, 7.2e-6 truncation, 9.5e-6 conversations, against the exact class's 3e-4."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from oracle import conversation as conv_mod
from oracle.session import Session
from specgate.upkeep import corpus
from tests.hypothesis_budget import examples
from tests.oracle import session_checks as checks

ARCHS = sorted(checks.ARCHITECTURES)
# A real chat prompt: multilingual text, newlines and special tokens, 35 tokens.
PROMPT = (
    "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHello 你好, Привет!\n\n"
    "def f(x):\n    return x  # café<|im_end|>\n<|im_start|>assistant\n"
)
MAX_TOKENS = 160  # conversations played on the model: every state at most this long (fast tier)


def prompt_ids() -> list[int]:
    _, tokenizer = checks.tiny(checks.ARCHITECTURES["qwen2"])
    return tokenizer.encode(PROMPT, True)


def cuts_of(n: int) -> st.SearchStrategy[list[int]]:
    """Chunk boundaries: any set, or every position (one token at a time)."""
    return st.one_of(st.just(list(range(1, n))), st.sets(st.integers(1, n - 1), max_size=8).map(sorted))


@examples(ci=12)  # each example: one prefill of ≤ 35 tokens, then up to 34 appends, 3-layer model
@given(data=st.data())
@pytest.mark.parametrize("arch", ARCHS)
def test_any_chunking_gives_the_one_shot_logits(arch, data):
    ids = prompt_ids()
    n = data.draw(st.integers(2, len(ids)), label="n")
    cuts = data.draw(cuts_of(n), label="cuts")
    problem = checks.chunking_problem(checks.ARCHITECTURES[arch], ids[:n], cuts)
    assert problem is None, problem


@pytest.mark.parametrize("arch", ARCHS)
def test_one_token_at_a_time_gives_the_one_shot_logits(arch):
    ids = prompt_ids()
    problem = checks.chunking_problem(checks.ARCHITECTURES[arch], ids, list(range(1, len(ids))))
    assert problem is None, problem


@examples(ci=30)
@given(data=st.data())
@pytest.mark.parametrize("arch", ARCHS)
def test_truncate_then_reappend_equals_fresh(arch, data):
    ids = prompt_ids()
    keep = data.draw(st.integers(1, len(ids) - 1), label="keep")
    again = data.draw(st.lists(st.integers(0, 151_642), min_size=1, max_size=12), label="again")
    problem = checks.truncate_problem(checks.ARCHITECTURES[arch], ids, keep, again)
    assert problem is None, problem


def played() -> list[tuple[str, str, str]]:
    """(architecture, template model, conversation): both architectures through the tiny
    models' own template (Qwen2.5) and Qwen3's (which drifts on past reasoning)."""
    short = checks.short_conversations(MAX_TOKENS)
    return [(a, t, c) for a in ARCHS for t in ("tiny", "qwen3-vocab") for c in short]


@pytest.mark.parametrize(("arch", "template", "conversation"), played())
def test_conversation_equals_fresh_render_and_prefill_at_every_turn(arch, template, conversation):
    model_id = checks.ARCHITECTURES[arch]
    conv = corpus.multi_turn_conversations()[conversation]
    problem = checks.conversation_problem(model_id, model_id if template == "tiny" else template, conv)
    assert problem is None, problem


def test_the_played_conversations_cover_drift_seam_and_plain_turns():
    """The conversations played on the models include each kind of turn (else the
    conversation test could not catch stale KV or a seam)."""
    short = checks.short_conversations(MAX_TOKENS)
    assert len(short) >= 15, sorted(short)
    kinds = set()
    _, tokenizer = checks.tiny(checks.ARCHITECTURES["qwen2"])
    for template_id in (checks.ARCHITECTURES["qwen2"], "qwen3-vocab"):
        template = checks.template_of(template_id)
        for c in short.values():
            dry = conv_mod.Conversation(
                None, template, lambda s: tokenizer.encode(s, True), **c.get("kwargs", {})
            )
            for t in c["turns"]:
                turn = dry.turn(t.get("append", ()), t.get("system"), **t.get("kwargs", {}))
                inc = turn.increment
                kinds.add("drift" if inc.drift else "seam" if inc.seam else "append-only")
    assert kinds == {"drift", "seam", "append-only"}


def test_corpus_has_the_shapes_the_issue_asks_for():
    convs = corpus.multi_turn_conversations()
    assert len(convs) >= 24
    assert all(3 <= len(c["turns"]) <= 8 for c in convs.values())
    shapes = {c["shape"] for c in convs.values()}
    assert {"plain chat", "system prompt change", "reasoning_content", "inline <think>", "enable_thinking",
            "tools", "R1-style", "multilingual", "whitespace seam"} <= shapes  # fmt: skip


# -- the session's operations -------------------------------------------------------------


def test_drift_names_turn_offset_token_and_both_texts():
    template = checks.template_of("qwen3-vocab")
    _, tokenizer = checks.tiny(checks.ARCHITECTURES["qwen3"])
    dry = conv_mod.Conversation(None, template, lambda s: tokenizer.encode(s, True))
    dry.turn([{"role": "user", "content": "Name a prime."}])
    dry.turn([{"role": "assistant", "content": "7", "reasoning_content": "Small primes: 2, 3, 5, 7."}])
    turn = dry.turn([{"role": "user", "content": "Another?"}])
    drift = turn.increment.drift
    assert drift is not None and turn.increment.delta is None
    past, new = turn.increment.past, turn.increment.new
    assert past[: drift.offset] == new[: drift.offset] and past[drift.offset] != new[drift.offset]
    assert past[drift.offset :].startswith("<think>") and new[drift.offset :].startswith("7<|im_end|>")
    assert str(drift).startswith(f"turn 3: template drift at offset {drift.offset} (token {drift.token})")
    assert "<think>" in drift.past and "7<|im_end|>" in drift.new
    assert turn.stale is not None and turn.stale.token == drift.token and turn.dropped > 0


def test_seam_the_whole_render_is_right():
    """An answer starting with a newline after the generation prompt's newline: the
    delta tokenized alone ("\\n" then "\\n…") is not the whole render's ("\\n\\n")."""
    template = checks.template_of(checks.ARCHITECTURES["qwen2"])
    _, tokenizer = checks.tiny(checks.ARCHITECTURES["qwen2"])
    nl, nlnl = tokenizer.encode("\n", False), tokenizer.encode("\n\n", False)
    assert len(nl) == len(nlnl) == 1
    dry = conv_mod.Conversation(None, template, lambda s: tokenizer.encode(s, True))
    dry.turn([{"role": "user", "content": "Go."}])
    turn = dry.turn([{"role": "assistant", "content": "\nHere."}])
    seam = turn.increment.seam
    assert turn.increment.drift is None and seam is not None
    assert seam.alone[:2] == nl * 2 and seam.whole[0] == nlnl[0]
    assert turn.increment.ids == tokenizer.encode(turn.increment.new, True)
    assert turn.stale is not None and turn.stale.offset is None and turn.dropped == 1


def test_each_turn_costs_only_its_delta():
    model, tokenizer = checks.tiny(checks.ARCHITECTURES["qwen2"])
    template = checks.template_of(checks.ARCHITECTURES["qwen2"])
    session = Session(model)
    conv = conv_mod.Conversation(session, template, lambda s: tokenizer.encode(s, True))
    conv.turn([{"role": "user", "content": "Hello"}])
    before = session.evaluated
    turn = conv.turn([{"role": "assistant", "content": "Hi!"}, {"role": "user", "content": "Bye"}])
    assert turn.dropped == 0 and turn.kept == before
    assert session.evaluated - before == turn.appended == turn.n_tokens - before


def test_generate_joins_the_cache_and_continues_like_fresh():
    model, tokenizer = checks.tiny(checks.ARCHITECTURES["qwen3"])
    session = Session(model)
    ids = prompt_ids()
    session.append(ids)
    out = session.generate(lambda i: tokenizer.decode_bytes([i]), {"max_tokens": 6, "temperature": 0.0}, [])
    assert len(out["ids"]) == 6 and session.ids == [*ids, *out["ids"]]
    fresh = checks.one_shot(checks.ARCHITECTURES["qwen3"], session.ids, last_only=True)[-1]
    assert np.abs(session.last_logits() - fresh).max() <= 3e-4
    # greedy from a fresh prefill picks the same tokens
    again = Session(model)
    again.append(ids)
    assert (
        again.generate(lambda i: tokenizer.decode_bytes([i]), {"max_tokens": 6, "temperature": 0.0}, [])[
            "ids"
        ]
        == out["ids"]
    )


def test_bad_operations_are_clear_errors():
    model, _ = checks.tiny(checks.ARCHITECTURES["qwen2"])
    session = Session(model)
    with pytest.raises(ValueError, match="at least one token"):
        session.append([])
    with pytest.raises(ValueError, match="cannot truncate the session to 3 tokens: it holds 0"):
        session.truncate(3)
    with pytest.raises(ValueError, match="empty"):
        session.last_logits()
    session.append([1, 2, 3])
    session.truncate(2)
    assert session.ids == [1, 2] and model.n_past == 2
    session.reset()
    assert session.ids == [] and model.n_past == 0
