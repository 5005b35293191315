"""The state stages: what an engine keeps between requests (its sessions, PROTOCOL.md
4.7), judged in the logits stage's two conformance classes against a fresh one-shot
prefill.

* ``state_incremental``: a prompt appended in chunks — one token at a time, uneven
  chunks, whole — gives the one-shot logits at its last position;
* ``state_conversation``: a multi-turn conversation, each turn appending only the delta
  the oracle's incremental renderer defines and truncating the KV a template drift or a
  seam makes stale, gives after every turn a fresh prefill's logits of the whole render;
* ``state_reuse``: two sessions over branches that share a prefix — the second opened
  after the first is closed, beside it, appended in turns with it, or cut back to the
  shared prefix — give at every judged point a fresh prefill's logits of what that
  session holds: whatever an engine reuses between sessions (a prefix cache, a forked
  sequence, one slot switched between two), nothing stale is read;
* ``state_generate``: the decode loop from a session (``session_generate``): a prompt's
  generation in a new session (cold), in a second session over the same prompt after
  the first was closed (warm: whatever cache the engine kept), and again after a
  truncate back to the prompt, are the same ids, and the session then holds the prompt
  and what was emitted; a greedy stream is held to the reference's by the generate
  gate's near-tie rule of the class;
* ``state_chat``: the conversations of ``state_conversation`` through an engine that
  renders and caches itself (``conversation_*``, a chat server's form: the engine is sent
  each turn's messages and answers the ids its cache holds and the last logits): the ids
  must be the whole render's tokenization — a seam (the delta tokenized alone) or a drift
  kept (stale KV with the new render's tokens after it) named when they are not — and the
  logits a fresh prefill's of the whole render.

The comparison and the playing of a case are ``specgate.checks.state``; the cases are
built by ``specgate.stages.state_cases`` (recorded from the oracle's one-shot prefill,
held to the logits snapshot's references first; beside it at every judged point
transformers' and llama.cpp's own rows, played on their KV caches and one-shot, which the
oracle's is held to: ``specgate.stages.state_references``). A failing case is not shrunk or replayed
(no ``replay``): its ids only make sense with its chunks or turns; it is diagnosed
(``specgate.diagnose.state``: played again with a classic KV-cache defect applied to the
oracle's sessions).
"""

from __future__ import annotations

from impl.protocol import CONFORMANCE_CLASSES
from specgate.stages.base import Stage
from specgate.stages.state_cases import (
    chat_cases,
    conversation_cases,
    generate_cases,
    incremental_cases,
    reuse_cases,
)

STATE_INCREMENTAL = Stage(
    "state_incremental", capability="session", snapshot="state_incremental", classes=CONFORMANCE_CLASSES,
    build=incremental_cases,
)  # fmt: skip
STATE_CONVERSATION = Stage(
    "state_conversation", capability="session", snapshot="state_conversation", classes=CONFORMANCE_CLASSES,
    build=conversation_cases,
)  # fmt: skip
STATE_REUSE = Stage(
    "state_reuse", capability="session", snapshot="state_reuse", classes=CONFORMANCE_CLASSES, build=reuse_cases,
)  # fmt: skip
STATE_GENERATE = Stage(
    "state_generate", capability="session", snapshot="state_generate", classes=CONFORMANCE_CLASSES,
    build=generate_cases,
)  # fmt: skip
STATE_CHAT = Stage(
    "state_chat", capability="conversation", snapshot="state_chat", classes=CONFORMANCE_CLASSES, build=chat_cases,
)  # fmt: skip
