"""How the state stages' cases are built (``Stage.build``) and recorded.

Cases are data: per model a ``state_incremental``, a ``state_conversation``, a
``state_reuse``, a ``state_generate``, a ``state_batch`` and a
``state_chat`` snapshot, built from the corpus and the model's tokenizer and template,
each case carrying its ids beside the reference logits at the last position.

* ``incremental_cases``: per prompt (the forward corpus' ``prompts``, tokenized with
  special tokens parsed) and chunking (``CHUNKINGS``: one token at a time, uneven
  chunks, whole), the prompt's ids, the chunk sizes and the one-shot reference.
* ``conversation_cases``: per multi-turn corpus conversation, per turn what the
  oracle's incremental renderer (``oracle.conversation``, a dry run) defines — the
  whole render's ids, the tokens of the cache kept (``keep``: up to the first token the
  new render changes — a template drift, a seam — or all), the drift or stale KV named
  (turn, offset, both texts) — and the one-shot reference of the whole render.
* ``reuse_cases``: per pair of the conversations' renders that share a prefix and then
  differ (``branch_pairs``: the longest such branch across conversations, and a
  template drift inside one), per scenario (``SCENARIOS``: the second session opened
  after the first is closed, beside it, the two appended in turns, a session cut back
  to the shared prefix) the steps on two sessions and the one-shot reference of every
  judged point. An engine may reuse the KV of the shared prefix (a prefix cache, a
  forked sequence) or not; it must never read a token of the other session past it.
* ``batch_cases``: batches of the corpus prompts and the first renders, of different
  lengths (in order, reversed, with a one-token prompt, with a prompt twice), each
  prompt with the one-shot reference of it alone.
* ``chat_cases``: the conversations again, for an engine that renders and caches itself
  (``conversation_turn``): per turn the messages sent, the whole render's ids, the drift
  or seam the dry run names (at a seam, the past's ids followed by the delta tokenized
  alone), and the one-shot reference of the whole render.
* ``generate_cases``: per conversation's first render (``GENERATE_PROMPTS`` of them) and
  sampler (``GENERATE_PARAMS``: greedy, seeded), the prompt, the params and the oracle's
  stream (ids, finish reason, top-2 margins: the near-tie rule of the generate gate).

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

import itertools
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


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading ids ``a`` and ``b`` share."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def branch_pairs(renders: Mapping[str, Sequence[int]]) -> dict[str, tuple[list[int], list[int], int]]:
    """Two branches per model, as (first, second, shared prefix length), each sharing a
    prefix and then differing (neither holds the other), the first at least two tokens past
    the shared prefix (its tail is in the cache when the second is asked):

    * ``branch``: renders of two different conversations with the longest shared prefix
      (the same system prompt and opening, then another user message);
    * ``drift``: a turn's render and the next turn's in one conversation where the
      template re-renders history (the first such, by conversation and turn).

    ``renders`` maps ``"<conversation>/<turn>"`` to ids, in turn order."""

    def fits(a: Sequence[int], b: Sequence[int]) -> int | None:
        p = common_prefix(a, b)
        return p if p > 0 and p + 2 <= len(a) and p < len(b) else None

    labels = list(renders)
    best: tuple[int, str, str] | None = None
    for i, x in enumerate(labels):
        for y in labels[i + 1 :]:
            if x.split("/")[0] == y.split("/")[0]:
                continue
            for first, second in ((x, y), (y, x)):
                p = fits(renders[first], renders[second])
                if p is not None and (best is None or p > best[0]):
                    best = (p, first, second)
    pairs: dict[str, tuple[list[int], list[int], int]] = {}
    if best is not None:
        pairs["branch"] = (list(renders[best[1]]), list(renders[best[2]]), best[0])
    for x, y in itertools.pairwise(labels):
        same_conversation = x.split("/")[0] == y.split("/")[0]
        # (fits: the next render does not extend this one, the template re-rendered it: a drift)
        if same_conversation and (p := fits(renders[x], renders[y])) is not None:
            pairs["drift"] = (list(renders[x]), list(renders[y]), p)
            break
    return pairs


def _open(label: str) -> dict[str, Any]:
    return {"op": "open", "session": label}


def _close(label: str) -> dict[str, Any]:
    return {"op": "close", "session": label}


def _append(label: str, start: int, end: int, point: int | None = None) -> dict[str, Any]:
    step: dict[str, Any] = {"op": "append", "session": label, "span": [start, end]}
    if point is not None:
        step["point"] = point
    return step


def after_close(a: list[int], b: list[int], shared: int) -> tuple[dict[str, list[int]], list[dict[str, Any]]]:
    """Session ``a`` holds the first branch and is closed; a new session ``b`` is handed
    the second: whatever the engine kept of ``a``, ``b`` reads nothing past the shared prefix."""
    steps = [_open("a"), _append("a", 0, len(a)), _close("a"), _open("b"), _append("b", 0, len(b), 0),
             _close("b")]  # fmt: skip
    return {"a": a, "b": b}, steps


def side_by_side(
    a: list[int], b: list[int], shared: int
) -> tuple[dict[str, list[int]], list[dict[str, Any]]]:
    """Session ``a`` holds the first branch but its last token and stays open; ``b`` is
    handed the second; then ``a`` its last token: a fork must copy, not alias, the shared
    prefix (each session's later appends see its own tokens only)."""
    steps = [_open("a"), _append("a", 0, len(a) - 1), _open("b"), _append("b", 0, len(b), 0),
             _append("a", len(a) - 1, len(a), 1), _close("b"), _close("a")]  # fmt: skip
    return {"a": a, "b": b}, steps


def interleaved(a: list[int], b: list[int], shared: int) -> tuple[dict[str, list[int]], list[dict[str, Any]]]:
    """Two open sessions handed branches of one length in uneven chunks, in turns (``a``
    then ``b``): the engine switches between their caches after every chunk."""
    n = min(len(a), len(b))
    sizes = chunkings(n)["uneven"]
    steps, at = [_open("a"), _open("b")], 0
    for k, size in enumerate(sizes):
        last = k == len(sizes) - 1
        steps += [
            _append("a", at, at + size, 0 if last else None),
            _append("b", at, at + size, 1 if last else None),
        ]
        at += size
    return {"a": a[:n], "b": b[:n]}, [*steps, _close("a"), _close("b")]


def cut_back(a: list[int], b: list[int], shared: int) -> tuple[dict[str, list[int]], list[dict[str, Any]]]:
    """Session ``a`` holds the first branch and is closed; a new session ``b`` is handed only
    the shared prefix, which the cache holds whole: the logits asked are at the prefix's
    last position, not at the cached branch's."""
    steps = [_open("a"), _append("a", 0, len(a)), _close("a"), _open("b"), _append("b", 0, shared, 0),
             _close("b")]  # fmt: skip
    return {"a": a, "b": a[:shared]}, steps


Scenario = Callable[[list[int], list[int], int], tuple[dict[str, list[int]], list[dict[str, Any]]]]
#: How two sessions are played over a branch, by name.
SCENARIOS: dict[str, Scenario] = {
    "after_close": after_close, "side_by_side": side_by_side, "interleaved": interleaved, "cut_back": cut_back,
}  # fmt: skip


def reuse_points(
    sessions: Mapping[str, Sequence[int]], steps: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """The judged points of a reuse case, in their order: the session and its token count."""
    points = sorted((s["point"], s["session"], s["span"][1]) for s in steps if "point" in s)
    return [{"session": label, "n": n} for _, label, n in points]


def reuse_cases(renders: Mapping[str, Sequence[int]], one_shot: OneShot) -> dict[str, Any]:
    """Per branch (``branch_pairs``) and scenario (``SCENARIOS``): the two sessions' ids, the
    steps, and per judged point the one-shot reference of the ids its session then holds."""
    cases = {}
    for pair_name, (a, b, shared) in branch_pairs(renders).items():
        for name, scenario in SCENARIOS.items():
            sessions, steps = scenario(a, b, shared)
            points = reuse_points(sessions, steps)
            for point in points:
                point["reference"] = reference_record(one_shot(sessions[point["session"]][: point["n"]]))
            cases[f"{pair_name}_{name}"] = {
                "shape": f"{name}: two sessions sharing their first {shared} tokens ({pair_name})",
                "shared": shared, "sessions": sessions, "steps": steps, "points": points,
            }  # fmt: skip
    return cases


#: Conversations whose first render is a ``state_generate`` prompt, per model.
GENERATE_PROMPTS = 2
#: The samplers ``state_generate`` plays: greedy (judged against the reference stream) and
#: seeded (warm against cold: PROTOCOL.md 4.7 restarts the draws with each request).
GENERATE_PARAMS: dict[str, dict[str, Any]] = {
    "greedy": {"max_tokens": 8, "temperature": 0.0, "repeat_penalty": 1.0, "top_candidates": 2},
    "seeded": {"max_tokens": 8, "temperature": 0.8, "top_k": 40, "top_p": 0.95, "repeat_penalty": 1.1,
               "seed": 42, "top_candidates": 2},
}  # fmt: skip

Generate = Callable[[Sequence[int], Mapping[str, Any]], Mapping[str, Any]]  # prompt, params -> result


def generate_cases(prompts: Mapping[str, Sequence[int]], generate: Generate) -> dict[str, Any]:
    """Per prompt and sampler: the prompt, the params, and the reference stream."""
    cases = {}
    for prompt_id, ids in prompts.items():
        for name, params in GENERATE_PARAMS.items():
            got = generate(ids, params)
            reference = {
                "ids": list(got["ids"]), "finish_reason": got["finish_reason"],
                "margins": [float(s["top"][0][1] - s["top"][1][1]) for s in got["steps"]],
            }  # fmt: skip
            cases[f"{prompt_id}_{name}"] = {
                "prompt": list(ids),
                "params": dict(params),
                "reference": reference,
            }
    return cases


def batch_cases(prompts: Mapping[str, Sequence[int]], one_shot: OneShot) -> dict[str, Any]:
    """Batches of the prompts (``prompts``: label -> ids, of different lengths): all of them
    in order and reversed (a batch sorted by length must answer in the order asked), the
    shortest against a one-token prompt and the longest, the same prompt twice beside
    another; per prompt the one-shot reference of it alone."""
    labels = list(prompts)
    by_length = sorted(labels, key=lambda label: len(prompts[label]))
    one_token = {"one_token": list(prompts[by_length[0]][:1])}
    batches = {
        "mixed": labels,
        "reversed": labels[::-1],
        "one_token_and_longest": ["one_token", by_length[-1], by_length[0]],
        "duplicates": [by_length[0], by_length[-1], by_length[0]],
    }
    every = {**prompts, **one_token}
    references = {label: reference_record(one_shot(every[label])) for label in every}
    return {
        name: {"labels": chosen, "prompts": [list(every[label]) for label in chosen],
               "references": [references[label] for label in chosen]}
        for name, chosen in batches.items()
    }  # fmt: skip


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


def chat_cases(
    conversations: Mapping[str, Mapping[str, Any]],
    play: Callable[[Mapping[str, Any]], Sequence[Any]],
    tokenize: Callable[[str], list[int]],
    one_shot: OneShot,
) -> dict[str, Any]:
    """Per conversation, for an engine that renders and caches itself (``conversation_turn``):
    the template's keywords, and per turn what the client sends (``append``, ``system``,
    ``kwargs``: the corpus turn), the whole render's ids, what the oracle's dry run names
    (the drift, the stale KV; at a seam the ids of the past render followed by the delta
    tokenized alone: ``seam.alone``), and the one-shot reference at its last position."""
    cases = {}
    for conversation_id, conversation in conversations.items():
        played = play(conversation)
        turns = []
        for source, t, instructions in zip(
            conversation["turns"], played, conversation_turns(played), strict=True
        ):
            turn: dict[str, Any] = {"append": [dict(m) for m in source.get("append", ())]}
            turn.update({k: source[k] for k in ("system", "kwargs") if k in source})
            turn["ids"] = instructions["ids"]
            turn.update({k: instructions[k] for k in ("drift", "stale") if k in instructions})
            if t.increment.seam is not None:
                inc = t.increment
                alone = tokenize(inc.past) + tokenize(inc.new[len(inc.past) :])
                turn["seam"] = {"token": inc.seam.token, "alone": alone}
            turn["reference"] = reference_record(one_shot(turn["ids"]))
            turns.append(turn)
        cases[conversation_id] = {
            "shape": conversation.get("shape", ""), "kwargs": dict(conversation.get("kwargs", {})), "turns": turns,
        }  # fmt: skip
    return cases


# ---------------------------------------------------------------------------
# recording (the oracle's one-shot prefill, held to the logits snapshot first)

REFERENCE = (
    "the oracle's one-shot prefill (oracle.forward.Model.prefill from an empty KV cache, float32 on the "
    "GGUF's dequantized weights) at the last position; held before recording to this model's logits "
    "snapshot (transformers, exact class; llama.cpp, quantized class) by the logits gate's check: see "
    "oracle_vs_logits_snapshot"
)
#: The stages whose judged points carry transformers' and llama.cpp's own played rows too.
LIBRARY_REFERENCED = ("state_incremental", "state_conversation")
GENERATE_REFERENCE = (
    "the oracle's decode loop (oracle.decode_loop.generate over its forward from an empty KV cache, the "
    "protocol's sampler and random.Random(seed)): ids, finish reason and each step's top-2 logit margin; "
    "its forward held to this model's logits snapshot first (see oracle_vs_logits_snapshot)"
)


def oracle_one_shot(model: Any) -> OneShot:
    from impl.oracle import load_forward_model

    forward = load_forward_model(model.gguf)

    def one_shot(ids: Sequence[int]) -> np.ndarray:
        forward.reset()
        return forward.prefill(list(ids), outputs=[-1])[0]

    return one_shot


def oracle_generate(model: Any) -> Generate:
    from impl.oracle import OracleEngine

    oracle = OracleEngine()
    return lambda ids, params: oracle.generate(model, list(ids), dict(params))


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
            got = np.asarray(oracle.logits(model, case["ids"], case["positions"]), dtype=np.float32)
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


def record(
    model_id: str,
    root: Path = snapshots.SNAPSHOT_ROOT,
    with_references: bool = True,
    stages: Sequence[str] | None = None,
) -> list[Path]:
    """Build and write the six state snapshots of ``model_id`` from the oracle's one-shot
    prefill (``state_generate``: its decode loop); in the incremental and conversation ones
    each judged point with transformers' and llama.cpp's own played and one-shot rows beside
    it (``state_references.add``; ``with_references=False``: the oracle's alone, no torch or
    llama.cpp). ``stages``: only these snapshots (default: all)."""
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

    def play(conversation: Mapping[str, Any]) -> Sequence[Any]:
        return drift_table.play(template, tokenize, dict(conversation))

    renders = {f"{c}/{k}": list(t.increment.ids) for c, conversation in conversations.items()
               for k, t in enumerate(play(conversation), 1)}  # fmt: skip
    first_renders = {c: renders[f"{c}/1"] for c in list(conversations)[:GENERATE_PROMPTS]}
    batched = {**prompts, **{f"{c}/1": ids for c, ids in first_renders.items()}}
    builders: dict[str, Callable[[], dict[str, Any]]] = {
        "state_generate": lambda: generate_cases(first_renders, oracle_generate(model)),
        "state_incremental": lambda: incremental_cases(prompts, one_shot),
        "state_conversation": lambda: conversation_cases(conversations, play, one_shot),
        "state_reuse": lambda: reuse_cases(renders, one_shot),
        "state_batch": lambda: batch_cases(batched, one_shot),
        "state_chat": lambda: chat_cases(conversations, play, tokenize, one_shot),
    }
    unknown = sorted(set(stages or ()) - set(builders))
    if unknown:
        raise SystemExit(
            f"no state snapshot named {', '.join(unknown)}: the state snapshots are {', '.join(builders)}"
        )
    built = {stage: build() for stage, build in builders.items() if stages is None or stage in stages}
    referenced = {stage: built[stage] for stage in LIBRARY_REFERENCED if stage in built}
    played = state_references.add(model, referenced, one_shot) if with_references and referenced else {}
    paths = []
    for stage, cases in built.items():
        what = GENERATE_REFERENCE if stage == "state_generate" else REFERENCE
        libraries = played if stage in LIBRARY_REFERENCED else {}
        packages = ("numpy", "gguf", "jinja2", *(state_references.PACKAGES if libraries else ()))
        provenance = snapshots.provenance(model, {"oracle": what, **libraries}, packages)
        chosen = "" if stages is None else f"--only {','.join(stages)} "
        provenance["command"] = f"python -m specgate.stages.state_cases {chosen}{model_id}"
        provenance["oracle_vs_logits_snapshot"] = checked
        paths.append(snapshots.write(model, stage, {"provenance": provenance, "cases": cases}, root))
    return paths


def main(argv: list[str]) -> int:
    """``python -m specgate.stages.state_cases [--only STAGE,STAGE] [MODEL ...]``: record the
    state snapshots (``--only``: those of these stages alone)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m specgate.stages.state_cases")
    parser.add_argument("--only", help="comma-separated state snapshots to record (default: all)")
    parser.add_argument("models", nargs="*", help=f"model ids (default: {', '.join(MODELS)})")
    args = parser.parse_args(argv)
    only = args.only.split(",") if args.only else None
    for model_id in args.models or MODELS:
        for path in record(model_id, stages=only):
            print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
