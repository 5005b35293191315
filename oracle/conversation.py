"""Conversation mode: each turn appends to the KV cache only what the turn adds.

A chat engine keeps a session (``oracle.session``) across turns. At each turn:

1. **Render incrementally.** The past state — the history up to the assistant's last
   reply — is rendered with ``add_generation_prompt=false`` and the new state, which
   asks for the next answer, with ``true``; the *delta* is what the new render adds
   after the past one (``oracle.template.delta``'s rule, minfer's ``format_single``).
   In general a state is rendered with the generation prompt exactly when it asks for
   an answer (``asks``: its last message is not the assistant's): a turn that records
   the engine's reply renders the past question *with* its generation prompt — what
   the cache holds — and the reply without one.
   When the new render does not start with the past render — *template drift*: the
   template re-renders history differently (Qwen3 drops past reasoning once a new
   user turn follows it; a changed system prompt) — there is no delta, and the
   ``Drift`` says where: the turn, the character offset, the token index, and both
   texts around it.
2. **Tokenize the whole render.** The delta tokenized alone can differ from the
   whole render tokenized: BPE merges across the boundary (the past ends in
   ``"\\n"`` and the delta starts with ``"\\n"``, the whole has one ``"\\n\\n"``
   token). The whole render's tokenization is the right one — it is what a fresh
   one-shot prompt would be — and a ``Seam`` names the first token where the past's
   and the delta's tokens, joined, differ from it.
3. **Sync the cache** to the whole render's ids (``Session.sync``): keep the tokens
   the cache holds up to the first that differs, drop the KV from there (a drift,
   a seam, or the generation prompt the history render spells differently), and
   evaluate the rest. A turn without drift or seam costs only its delta; stale KV is
   never kept.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from oracle.session import Session
from oracle.template import ChatTemplate, parting

Messages = Sequence[Mapping[str, Any]]
Tokenize = Callable[[str], list[int]]  # a render's text -> ids (special tokens parsed)

AROUND = 24  # characters of each text shown on either side of a drift


@dataclass(frozen=True)
class Drift:
    """The new render departs from the past render: at character ``offset``, and at
    token ``token`` of the two renders' tokenizations."""

    turn: int
    offset: int
    token: int
    past: str  # the past render around the offset
    new: str  # the new render around the offset

    def __str__(self) -> str:
        return (
            f"turn {self.turn}: template drift at offset {self.offset} (token {self.token}): "
            f"the past render {self.past!r} vs the new render {self.new!r}"
        )


@dataclass(frozen=True)
class Seam:
    """The delta tokenized alone after the past's tokens differs from the whole render
    tokenized, first at token ``token`` (``alone`` / ``whole``: the tokens from there)."""

    turn: int
    token: int
    alone: list[int]
    whole: list[int]

    def __str__(self) -> str:
        return (
            f"turn {self.turn}: seam at token {self.token}: the delta tokenized alone gives "
            f"{self.alone} where the whole render gives {self.whole}"
        )


@dataclass(frozen=True)
class Increment:
    """One turn's renders and tokens, and what appending the delta alone would get wrong."""

    turn: int
    past: str
    new: str
    ids: list[int]  # the whole new render tokenized: what the cache must hold
    drift: Drift | None
    seam: Seam | None

    @property
    def delta(self) -> str | None:
        """What the turn appends to the past render; None across a drift."""
        return None if self.drift is not None else self.new[len(self.past) :]


def around(text: str, at: int) -> str:
    return text[max(0, at - AROUND) : at + AROUND]


def render(
    template: ChatTemplate, messages: Messages, add_generation_prompt: bool, kwargs: Mapping[str, Any]
) -> str:
    """A state's render; the empty state renders to nothing."""
    return (
        template.render(messages, add_generation_prompt=add_generation_prompt, **kwargs) if messages else ""
    )


def asks(messages: Messages) -> bool:
    """A state asks for an answer unless it ends with the assistant's own message."""
    return bool(messages) and messages[-1].get("role") != "assistant"


def increment(
    template: ChatTemplate,
    tokenize: Tokenize,
    past: Messages,
    new: Messages,
    turn: int = 1,
    past_kwargs: Mapping[str, Any] | None = None,
    new_kwargs: Mapping[str, Any] | None = None,
) -> Increment:
    """The past and the new state rendered (each with the generation prompt when it
    ``asks``); where the new render drifts from the past one, and where the delta's
    tokens meet a seam."""
    past_kwargs = {} if past_kwargs is None else past_kwargs
    past_text = render(template, past, asks(past), past_kwargs)
    new_text = render(template, new, asks(new), past_kwargs if new_kwargs is None else new_kwargs)
    ids = tokenize(new_text)
    past_ids = tokenize(past_text) if past_text else []
    drift = seam = None
    offset = parting(past_text, new_text)
    if offset is not None:
        token = parting(past_ids, ids)
        drift = Drift(turn, offset, len(past_ids) if token is None else token, around(past_text, offset),
                      around(new_text, offset))  # fmt: skip
    else:
        joined = past_ids + tokenize(new_text[len(past_text) :])
        if joined != ids:  # the same text either way: neither can be a prefix of the other
            at = next(i for i, (a, b) in enumerate(zip(joined, ids, strict=False)) if a != b)
            seam = Seam(turn, at, joined[at : at + 4], ids[at : at + 4])
    return Increment(turn, past_text, new_text, ids, drift, seam)


@dataclass(frozen=True)
class Stale:
    """The cache held ``dropped`` tokens, from token ``token`` on, that the new render
    replaces: where the text the cache holds departs from the new render (``offset``;
    None when the text is a prefix and only the tokens at the seam differ)."""

    turn: int
    token: int
    dropped: int
    offset: int | None
    cached: str  # the cache's text around the offset (around its end for a seam)
    new: str

    def __str__(self) -> str:
        where = f"offset {self.offset}" if self.offset is not None else "a seam: the same text, other tokens"
        return (
            f"turn {self.turn}: the cache held {self.dropped} KV token(s) from token {self.token} on that the "
            f"new render replaces ({where}: {self.cached!r} vs {self.new!r})"
        )


@dataclass(frozen=True)
class Turn:
    """What a turn did to the session: the increment (drift, seam), the tokens of the
    cache kept, dropped (and why: ``stale``) and evaluated, the session's length and
    its last logits."""

    increment: Increment
    kept: int
    dropped: int
    appended: int
    n_tokens: int
    stale: Stale | None
    logits: np.ndarray = field(repr=False)


def with_system(messages: Messages, system: str) -> list[dict[str, Any]]:
    """``messages`` with the system prompt replaced (or put first when there is none)."""
    out = [dict(m) for m in messages]
    if out and out[0].get("role") == "system":
        out[0] = {**out[0], "content": system}
        return out
    return [{"role": "system", "content": system}, *out]


def next_state(
    messages: Messages,
    kwargs: Mapping[str, Any],
    append: Messages = (),
    system: str | None = None,
    turn_kwargs: Mapping[str, Any] | None = None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The conversation after a turn: ``append`` added, the system prompt replaced when
    ``system`` is given, the template's keywords updated from this turn on."""
    new = [*(dict(m) for m in messages), *(dict(m) for m in append)]
    if system is not None:
        new = with_system(new, system)
    return new, {**kwargs, **(turn_kwargs or {})}


def stale_of(turn: int, held: str, held_ids: Sequence[int], new: str, new_ids: Sequence[int]) -> Stale | None:
    """The KV tokens the cache (holding ``held_ids``, the tokens of ``held``) must drop to
    hold the new render: None when ``held_ids`` is a prefix of ``new_ids``."""
    token = parting(held_ids, new_ids)
    if token is None:
        return None
    offset = parting(held, new)
    at = len(held) if offset is None else offset
    return Stale(turn, token, len(held_ids) - token, offset, around(held, at), around(new, at))


class Conversation:
    """A conversation over a session: ``turn`` appends messages (and may change the
    system prompt or the template's keyword arguments) and syncs the cache. Without a
    session it is a dry run: the renders, drifts, seams and stale tokens of each turn,
    no model evaluated (what the drift table is built from)."""

    def __init__(
        self, session: Session | None, template: ChatTemplate, tokenize: Tokenize, **kwargs: Any
    ) -> None:
        self.session, self.template, self.tokenize = session, template, tokenize
        self.kwargs = dict(kwargs)
        self.messages: list[dict[str, Any]] = []
        self.turns = 0
        self.held = ""  # the text whose tokens the cache holds
        self.held_ids: list[int] = []

    def turn(self, append: Messages = (), system: str | None = None, **kwargs: Any) -> Turn:
        new, new_kwargs = next_state(self.messages, self.kwargs, append, system, kwargs)
        self.turns += 1
        inc = increment(self.template, self.tokenize, self.messages, new, self.turns, self.kwargs, new_kwargs)
        stale = stale_of(self.turns, self.held, self.held_ids, inc.new, inc.ids)
        if self.session is not None:
            synced = self.session.sync(inc.ids)
            kept, dropped, appended, logits = (
                synced.kept,
                synced.dropped,
                synced.appended,
                self.session.logits,
            )
        else:
            kept = len(self.held_ids) if stale is None else stale.token
            dropped, appended, logits = (
                len(self.held_ids) - kept,
                len(inc.ids) - kept,
                np.empty(0, np.float32),
            )
        self.messages, self.kwargs, self.held, self.held_ids = new, new_kwargs, inc.new, list(inc.ids)
        assert logits is not None
        return Turn(inc, kept, dropped, appended, len(inc.ids), stale, logits)

    def generate(
        self, piece: Callable[[int], bytes], params: Mapping[str, Any], stop_tokens: Sequence[int]
    ) -> dict[str, Any]:
        """The model's answer (``Session.generate``): its ids join the cache, its text the
        held text. The caller records the answer as a message in the next turn."""
        if self.session is None:
            raise ValueError("a dry-run conversation has no session to generate with")
        result = self.session.generate(piece, params, stop_tokens)
        self.held += bytes.fromhex(result["bytes"]).decode("utf-8", errors="replace")
        self.held_ids = list(self.session.ids)
        return result
