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
* ``state_batch`` (the optional capability ``batch``): prompts of different lengths
  evaluated together (``batch_logits``) give each prompt's alone logits at its last
  position, in the order asked.
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
oracle's is held to: ``specgate.stages.state_references``). A failing ``state_incremental``
case is replayed and shrunk (``replay_incremental``: its ids and the name of its chunking,
the chunks made anew for any length, the oracle's one-shot row the reference): the
smallest prompt still failing the same way. The other state cases are not replayed —
their ids only make sense with their turns, sessions or prompts together. Failing cases
are diagnosed (``specgate.diagnose.state``: played again with a classic KV-cache defect applied to the
oracle's sessions).
"""

from __future__ import annotations

from typing import Any

from impl.protocol import CONFORMANCE_CLASSES
from specgate.stages.base import Stage, Verdict
from specgate.stages.state_cases import (
    batch_cases,
    chat_cases,
    conversation_cases,
    generate_cases,
    incremental_cases,
    reuse_cases,
)


def replay_incremental(
    engine: Any, oracle: Any, model: Any, inp: dict[str, Any], conformance_class: str
) -> Verdict:
    """The state_incremental gate of one class on ``{"ids", "chunking"}``: the prompt appended
    in that chunking (``state_cases.chunkings``) to a new session, the oracle's one-shot
    logits at the last position the reference."""
    import numpy as np

    from specgate.checks import state as checks
    from specgate.outcomes.gate import not_applicable
    from specgate.stages.state_cases import chunkings, reference_record

    if conformance_class not in engine.classes:
        not_applicable(f"{engine.name} does not claim the {conformance_class!r} conformance class")
    ids = list(inp["ids"])
    row = np.asarray(oracle.batch_logits(model, [ids]), dtype=np.float32)[0]
    case = {"ids": ids, "chunks": chunkings(len(ids))[inp["chunking"]], "reference": reference_record(row)}
    played = checks.play_incremental(engine, model, case)
    failure = checks.judge_incremental(conformance_class, model.id, case, played)
    got = played.rows[0]
    top = int(np.argmax(got)) if isinstance(got, np.ndarray) and got.ndim == 1 and got.size else "named"
    return Verdict("fail" if failure else "pass", failure or "", {"top1": top}, {"top1": int(np.argmax(row))})


def incremental_input(case: dict[str, Any], _constructs: bool) -> dict[str, Any] | None:
    """A recorded case's replayable input: its ids and its chunking's name."""
    from specgate.stages.state_cases import chunkings

    named = [name for name, sizes in chunkings(len(case["ids"])).items() if sizes == case["chunks"]]
    return {"ids": list(case["ids"]), "chunking": named[0]} if named else None


STATE_INCREMENTAL = Stage(
    "state_incremental", capability="session", snapshot="state_incremental", classes=CONFORMANCE_CLASSES,
    replay=replay_incremental, case_input=incremental_input, build=incremental_cases,
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
STATE_BATCH = Stage(
    "state_batch", capability="batch", snapshot="state_batch", classes=CONFORMANCE_CLASSES, build=batch_cases,
)  # fmt: skip
STATE_CHAT = Stage(
    "state_chat", capability="conversation", snapshot="state_chat", classes=CONFORMANCE_CLASSES, build=chat_cases,
)  # fmt: skip
