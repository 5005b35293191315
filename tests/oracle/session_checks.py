"""The checks of the oracle's session and conversation mode, shared by ``test_session.py``
(the real oracle passes them) and ``test_session_mutations.py`` (each catches a
planted state bug). Each returns None when the property holds, else what broke.

The tolerance is the exact class's (``specgate.checks.logits.exact_tolerance``: the
same sums in differently shaped matmuls move float32 logits by rounding only)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any

import numpy as np

from oracle.conversation import Conversation
from oracle.forward import Model
from oracle.gguf import open_gguf
from oracle.session import Session
from oracle.template import ChatTemplate, chat_template_for
from oracle.tokenizer import Tokenizer
from specgate.checks.logits import exact_tolerance
from specgate.plugin import model_missing
from specgate.supply import models
from specgate.supply.models import model_ref
from specgate.upkeep import corpus

ARCHITECTURES = {"qwen2": "tiny-qwen2-f32", "qwen3": "tiny-qwen3-f32"}
WORST: dict[str, float] = {}  # the largest |Δlogit| each check has measured (reported by the tests)


@cache
def tiny(model_id: str, role: str = "session") -> tuple[Model, Tokenizer]:
    """The model (one instance per ``role``: the session's cache and the fresh one-shot
    prefills never share a KV cache) and its tokenizer."""
    if model_id not in models.cached_tiny_models():
        model_missing(f"{model_id} (run: specgate models tiny)")
    path = model_ref(model_id).gguf
    return Model.from_gguf(path), Tokenizer.from_gguf(path)


@cache
def template_of(model_id: str) -> ChatTemplate:
    model = model_ref(model_id)
    return chat_template_for(open_gguf(model.gguf, header_only=True).metadata, model.tokenizer_config)


def one_shot(model_id: str, ids: Sequence[int], last_only: bool = False) -> np.ndarray:
    """Logits at every position of ``ids`` (the last only) evaluated at once from an empty cache."""
    model, _ = tiny(model_id, "fresh")
    model.reset()
    return model.prefill(list(ids), outputs=[-1] if last_only else None)


def measure(name: str, worst: float) -> float:
    WORST[name] = max(WORST.get(name, 0.0), worst)
    return worst


def chunking_problem(model_id: str, ids: Sequence[int], cuts: Sequence[int]) -> str | None:
    """Appending ``ids`` in the chunks ``cuts`` makes gives, after each chunk, the one-shot
    logits at that chunk's last position."""
    model, _ = tiny(model_id)
    whole = one_shot(model_id, ids)
    session = Session(model)
    tol = exact_tolerance(model_id)
    start = 0
    for end in [*cuts, len(ids)]:
        n, logits = session.append(ids[start:end])
        if n != end:
            return f"after appending ids[{start}:{end}] the session holds {n} tokens, not {end}"
        worst = measure("chunking", float(np.abs(logits - whole[end - 1]).max()))
        if worst > tol:
            return f"chunks {cuts} of {len(ids)}: after ids[{start}:{end}] max |Δlogit| {worst:.3g} > {tol:g}"
        start = end
    return None


def truncate_problem(model_id: str, ids: Sequence[int], keep: int, again: Sequence[int]) -> str | None:
    """Append ``ids``, truncate to ``keep``, append ``again``: the session equals a fresh
    one-shot prefill of ``ids[:keep] + again``."""
    model, _ = tiny(model_id)
    want = [*ids[:keep], *again]
    fresh = one_shot(model_id, want, last_only=True)[-1]
    session = Session(model)
    session.append(ids)
    if session.truncate(keep) != keep:
        return f"truncate({keep}) did not leave {keep} tokens"
    n, logits = session.append(again)
    if n != len(want) or session.ids != want:
        return (
            f"after truncate({keep}) and appending {len(again)} the session holds {n} tokens, not {len(want)}"
        )
    worst = measure("truncate", float(np.abs(logits - fresh).max()))
    tol = exact_tolerance(model_id)
    if worst > tol:
        return f"truncate({keep}) of {len(ids)} then {len(again)} more: max |Δlogit| {worst:.3g} > {tol:g} vs fresh"
    return None


def conversation_problem(model_id: str, template_id: str, conversation: dict[str, Any]) -> str | None:
    """At every turn the session holds exactly the whole new render's tokens, and its
    logits equal a fresh one-shot prefill of the fresh render."""
    model, tokenizer = tiny(model_id)
    template = template_of(template_id)

    def tokenize(text: str) -> list[int]:
        return tokenizer.encode(text, True)

    conv = Conversation(Session(model), template, tokenize, **conversation.get("kwargs", {}))
    tol = exact_tolerance(model_id)
    for t in conversation["turns"]:
        turn = conv.turn(t.get("append", ()), t.get("system"), **t.get("kwargs", {}))
        fresh_text = template.render(conv.messages, add_generation_prompt=conv.messages[-1]["role"] != "assistant",
                                     **conv.kwargs)  # fmt: skip
        fresh_ids = tokenize(fresh_text)
        if conv.session.ids != fresh_ids:
            at = next((i for i, (a, b) in enumerate(zip(conv.session.ids, fresh_ids, strict=False)) if a != b),
                      min(len(conv.session.ids), len(fresh_ids)))  # fmt: skip
            return (
                f"turn {turn.increment.turn}: the session holds {len(conv.session.ids)} tokens, the fresh render "
                f"{len(fresh_ids)}; first difference at token {at}"
            )
        want = one_shot(model_id, fresh_ids, last_only=True)[-1]
        worst = measure("conversation", float(np.abs(turn.logits - want).max()))
        if worst > tol:
            return f"turn {turn.increment.turn}: max |Δlogit| {worst:.3g} > {tol:g} vs a fresh prefill of the fresh render"
    return None


def short_conversations(limit: int) -> dict[str, dict[str, Any]]:
    """The corpus conversations whose every state renders (Qwen2.5's template) to at most
    ``limit`` tokens: the tools' system prompts make the others ~1,000 tokens long."""
    template, (_, tokenizer) = template_of(ARCHITECTURES["qwen2"]), tiny(ARCHITECTURES["qwen2"])
    out = {}
    for cid, conv in corpus.multi_turn_conversations().items():
        if "tools" in conv.get("kwargs", {}):
            continue
        dry = Conversation(None, template, lambda s: tokenizer.encode(s, True), **conv.get("kwargs", {}))
        sizes = [
            dry.turn(t.get("append", ()), t.get("system"), **t.get("kwargs", {})).n_tokens
            for t in conv["turns"]
        ]
        if max(sizes) <= limit:
            out[cid] = conv
    return out
