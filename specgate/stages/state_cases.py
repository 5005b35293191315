"""How the state stages' cases are built (``Stage.build``) and recorded.

Cases are data: per model a ``state_incremental`` and a ``state_conversation``
snapshot, built from the corpus and the model's tokenizer and template, each case
carrying its ids beside the reference logits at the last position.

* ``incremental_cases``: per prompt (the forward corpus' ``prompts``, tokenized with
  special tokens parsed) and chunking (``CHUNKINGS``: one token at a time, uneven
  chunks, whole), the prompt's ids, the chunk sizes and the one-shot reference.
* ``conversation_cases``: per multi-turn corpus conversation, per turn what the
  oracle's incremental renderer (``oracle.conversation``, a dry run) defines — the
  whole render's ids, the tokens of the cache kept (``keep``: up to the first token the
  new render changes — a template drift, a seam — or all), the drift or stale KV named
  (turn, offset, both texts) — and the one-shot reference of the whole render.

The reference is a fresh one-shot prefill of the ids (``one_shot``: ids -> the last
position's logits), an argument. ``record`` (``python -m specgate.stages.state_cases``)
records the oracle's (``oracle.forward.Model.prefill`` from an empty cache): the oracle
is no independent reference, so before it writes anything it holds the oracle's
one-shot logits to the model's ``logits`` snapshot — transformers (``exact``) and
llama.cpp (``quantized``) — on the snapshot's prompts of at most ``CHECK_TOKENS``
tokens, by the logits gate's own check, and writes that verdict into the provenance.
Beside the oracle's reference, every judged point records transformers' and llama.cpp's
own: the case played on each library's KV cache and its one-shot prefill
(``specgate.stages.state_references``, which also holds the oracle to them).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from specgate.checks import logit_metrics
from specgate.upkeep import corpus, snapshots

#: The models the state stages cover: the tiny models of both architectures, and the real one.
MODELS = ("tiny-qwen2-f32", "tiny-qwen3-f32", "qwen2.5-coder-0.5b-instruct")
#: The forward corpus' prompts appended in chunks (short: the fast tier gates them).
PROMPTS = ("raw_en", "chat_basic")
#: The multi-turn corpus conversations played, per model kind: plain turns, a system
#: prompt change (template drift) and a whitespace seam on every model.
CONVERSATIONS = {
    "tiny": ("01_plain_chat", "03_system_prompt_changes", "04_system_prompt_added_later",
             "20_assistant_leading_newlines"),
    "real": ("03_system_prompt_changes", "22_whitespace_only_turns"),
}  # fmt: skip
#: Uneven chunk sizes, cycled until the prompt is used up.
UNEVEN = (2, 5, 1, 3, 7)
#: Prompts of the logits snapshot the oracle is held to before it records (its 512-token
#: prompts would cost the real model a minute each).
CHECK_TOKENS = 64
TOP_K = corpus.TOP_K

OneShot = Callable[[Sequence[int]], np.ndarray]  # ids -> the last position's logits [n_vocab]


def chunkings(n: int) -> dict[str, list[int]]:
    """The ways a prompt of ``n`` tokens is appended: one at a time, uneven, whole."""
    uneven, left, i = [], n, 0
    while left:
        size = min(UNEVEN[i % len(UNEVEN)], left)
        uneven.append(size)
        left, i = left - size, i + 1
    return {"one_by_one": [1] * n, "uneven": uneven, "whole": [n]}


def reference_record(row: np.ndarray) -> dict[str, Any]:
    """One row of logits in the snapshots' top-k form (``logit_metrics.topk_record``)."""
    return logit_metrics.topk_record(np.asarray(row, dtype=np.float32)[None], [0], TOP_K)


def incremental_cases(prompts: Mapping[str, Sequence[int]], one_shot: OneShot) -> dict[str, Any]:
    """Per prompt and chunking: ids, chunk sizes, the one-shot reference at the last position."""
    cases = {}
    for prompt_id, ids in prompts.items():
        reference = reference_record(one_shot(ids))
        for name, sizes in chunkings(len(ids)).items():
            cases[f"{prompt_id}_{name}"] = {"ids": list(ids), "chunks": sizes, "reference": reference}
    return cases


def conversation_turns(turns: Sequence[Any]) -> list[dict[str, Any]]:
    """The gate's instructions per turn of a dry-run conversation (``oracle.conversation.Turn``):
    the whole render's ids, the cached tokens kept, and what the dropped ones were."""
    out, held = [], 0
    for t in turns:
        ids = list(t.increment.ids)
        keep = min(t.kept, len(ids) - 1)  # at least the last token is evaluated: its logits are judged
        turn: dict[str, Any] = {"ids": ids, "keep": keep, "drop": held - keep}
        if t.increment.drift is not None:
            d = t.increment.drift
            turn["drift"] = {"offset": d.offset, "token": d.token, "past": d.past, "new": d.new}
        if t.increment.seam is not None:
            turn["seam"] = {"token": t.increment.seam.token}
        if t.stale is not None:
            s = t.stale
            turn["stale"] = {"token": s.token, "dropped": s.dropped, "offset": s.offset, "cached": s.cached,
                             "new": s.new}  # fmt: skip
        out.append(turn)
        held = len(ids)
    return out


def conversation_cases(
    conversations: Mapping[str, Mapping[str, Any]],
    play: Callable[[Mapping[str, Any]], Sequence[Any]],
    one_shot: OneShot,
) -> dict[str, Any]:
    """Per conversation: its turns (``conversation_turns`` of ``play``'s dry run), each with
    the one-shot reference of the whole render at its last position."""
    cases = {}
    for conversation_id, conversation in conversations.items():
        turns = conversation_turns(play(conversation))
        for turn in turns:
            turn["reference"] = reference_record(one_shot(turn["ids"]))
        cases[conversation_id] = {"shape": conversation.get("shape", ""), "turns": turns}
    return cases


# ---------------------------------------------------------------------------
# recording (the oracle's one-shot prefill, held to the logits snapshot first)

REFERENCE = (
    "the oracle's one-shot prefill (oracle.forward.Model.prefill from an empty KV cache, float32 on the "
    "GGUF's dequantized weights) at the last position; held before recording to this model's logits "
    "snapshot (transformers, exact class; llama.cpp, quantized class) by the logits gate's check: see "
    "oracle_vs_logits_snapshot"
)


def oracle_one_shot(model: Any) -> OneShot:
    from impl.oracle import load_forward_model

    forward = load_forward_model(model.gguf)

    def one_shot(ids: Sequence[int]) -> np.ndarray:
        forward.reset()
        return forward.prefill(list(ids), outputs=[-1])[0]

    return one_shot


def oracle_vs_logits_snapshot(model: Any, max_tokens: int = CHECK_TOKENS) -> dict[str, str]:
    """The oracle's logits judged against ``model``'s logits snapshot by the logits gate's
    check, per class, on the prompts of at most ``max_tokens`` tokens: a verdict per class
    (``SystemExit`` when one fails: nothing is recorded from an oracle off its references)."""
    from impl.oracle import OracleEngine
    from specgate.checks import logits

    cases = {k: c for k, c in snapshots.load(model, "logits").items() if len(c["ids"]) <= max_tokens}
    oracle, verdict = OracleEngine(), {}
    for conformance_class, (reference, _) in logits.CLASSES.items():
        worst = {"max_abs_dlogit": 0.0, "kl_mean": 0.0}
        for case_id, case in cases.items():
            got = np.asarray(oracle.logits(model, case["ids"]), dtype=np.float32)
            failure, cmp = logits.check(conformance_class, model.id, case, got)
            if failure:
                raise SystemExit(
                    f"{model.id}: the oracle fails logits/{conformance_class} on {case_id}: {failure}"
                )
            worst = {k: max(worst[k], getattr(cmp, k)) for k in worst}
        verdict[conformance_class] = (
            f"passes against {reference} on {len(cases)} prompts of the logits snapshot "
            f"({', '.join(sorted(cases))}); worst max |Δlogit| {worst['max_abs_dlogit']:.3g}, "
            f"mean KL {worst['kl_mean']:.3g}"
        )
    return verdict


def record(model_id: str, root: Path = snapshots.SNAPSHOT_ROOT, with_references: bool = True) -> list[Path]:
    """Build and write both state snapshots of ``model_id`` from the oracle's one-shot prefill,
    each judged point with transformers' and llama.cpp's own played and one-shot rows beside it
    (``state_references.add``; ``with_references=False``: the oracle's alone, no torch or llama.cpp)."""
    from specgate.stages import state_references
    from specgate.supply.models import model_ref
    from specgate.upkeep import drift_table

    model = model_ref(model_id)
    checked = oracle_vs_logits_snapshot(model)
    template, tokenize = drift_table.oracle_side(model_id)
    rows: dict[tuple[int, ...], np.ndarray] = {}
    oracle = oracle_one_shot(model)

    def one_shot(ids: Sequence[int]) -> np.ndarray:  # each point's oracle row, kept for state_references
        return rows[tuple(ids)] if tuple(ids) in rows else rows.setdefault(tuple(ids), oracle(ids))

    prompts = {p: tokenize(str(corpus.prompts()[p]["text"])) for p in PROMPTS}
    kind = "tiny" if corpus.is_tiny(model_id) else "real"
    conversations = {c: corpus.multi_turn_conversations()[c] for c in CONVERSATIONS[kind]}
    built = {
        "state_incremental": incremental_cases(prompts, one_shot),
        "state_conversation": conversation_cases(
            conversations, lambda conversation: drift_table.play(template, tokenize, conversation), one_shot
        ),
    }
    played = state_references.add(model, built, one_shot) if with_references else {}
    paths = []
    for stage, cases in built.items():
        packages = ("numpy", "gguf", "jinja2", *(state_references.PACKAGES if with_references else ()))
        provenance = snapshots.provenance(model, {"oracle": REFERENCE, **played}, packages)
        provenance["command"] = f"python -m specgate.stages.state_cases {model_id}"
        provenance["oracle_vs_logits_snapshot"] = checked
        paths.append(snapshots.write(model, stage, {"provenance": provenance, "cases": cases}, root))
    return paths


def main(argv: list[str]) -> int:
    """``python -m specgate.stages.state_cases [MODEL ...]``: record the state snapshots."""
    for model_id in argv or MODELS:
        for path in record(model_id):
            print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
