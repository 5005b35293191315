"""Generate-gate comparisons: greedy token streams with near-tie classification,
and stop-string cases with known answers (including the streamed chunks); where an
engine's stream parts from the reference's at a near tie, its stop logic is judged
on its own ids (``replay_stop_logic``).

Two engines that compute the same model differently (f32 vs quantized activations,
another summation order) may legitimately pick different tokens where the top two
logits are almost equal. A divergence therefore counts as a failure only where the
reference's top-2 margin at that step exceeds the model's tie tolerance; closer
calls are classified as near-ties and reported, and the streams are not compared
past them (the contexts differ from there on).
"""

from __future__ import annotations

import codecs
import functools
from collections.abc import Mapping, Sequence
from typing import Any

from specgate.outcomes.gate import first_difference, first_divergence
from specgate.upkeep import snapshots

#: Logit margins at or below which an engine may legitimately pick the other token
#: than the reference:
#: - tiny models with float32 weights run in float32 in every engine: only the
#:   summation order differs (logit differences ~1e-6 at their scale), so 1e-3;
#: - transformers on a real model runs its weights dequantized to float32, in
#:   float32: logit differences from a float32 engine ~1e-4 on the 0.5B model, 0.01;
#: - llama.cpp on quantized or 16-bit weights quantizes/rounds the activations in
#:   its matmuls: its logits differ from float32 math by up to 0.60 on the 0.5B
#:   model (measured over 14 prompt positions, typical 0.3-0.5); a margin is a
#:   difference of two such logits, so margins up to 1.0 are near-ties.
TIE_TOLERANCE = {"float32": 1e-3, "transformers": 0.01, "llamacpp": 1.0}

#: The generate gate's near-tie tolerance, once per conformance class, and the stream
#: each class is held to:
#: - ``exact`` (float32 on the dequantized weights): 0.01 — an f32 engine's logits differ
#:   from transformers' by summation order only, ≤ 1.3e-3 on the 0.5B model (measured by
#:   the logits gate) and ~1e-5 on the tiny models; a margin, a difference of two logits,
#:   moves by at most twice that, and 0.01 leaves ~4x room;
#: - ``quantized`` (llama.cpp-class): 1.0 — llama.cpp's logits differ from float32 math by
#:   up to 0.60 on the 0.5B model (typical 0.3-0.5), so a margin can move by ~1.0.
CLASS_TIE_TOLERANCE = {"exact": 0.01, "quantized": 1.0}
CLASS_REFERENCE = {"exact": "transformers", "quantized": "llamacpp"}

STOP = "<stop token>"


def well_formed(result: Any) -> Mapping[str, Any]:
    """The engine's generate result, or ``EngineError`` (outcome ``error``) when it
    lacks what the gate reads: ``ids`` (ints), ``bytes`` (hex) and a known
    ``finish_reason``."""
    from impl.protocol import EngineError

    problem = None
    if not isinstance(result, Mapping):
        problem = f"a {type(result).__name__}, not an object"
    elif not isinstance(result.get("ids"), list) or not all(isinstance(i, int) for i in result["ids"]):
        problem = "no 'ids' list of integers"
    elif not isinstance(result.get("bytes"), str):
        problem = "no 'bytes' (hex string)"
    elif result.get("finish_reason") not in ("stop_token", "stop_string", "length"):
        problem = f"finish_reason {result.get('finish_reason')!r} is not stop_token, stop_string or length"
    else:
        try:
            bytes.fromhex(result["bytes"])
        except ValueError:
            problem = f"'bytes' {result['bytes'][:40]!r} is not hex"
    if problem:
        raise EngineError(f"generate answered a malformed result: {problem}")
    return result


def tie_tolerance(model_id: str, reference: str) -> float:
    if model_id.startswith("tiny-") and model_id.endswith("-f32"):
        return TIE_TOLERANCE["float32"]
    return TIE_TOLERANCE[reference]


def margins(steps: Sequence[Mapping[str, Any]]) -> list[float]:
    """Top-1 minus top-2 raw logit at every step."""
    return [float(s["top"][0][1] - s["top"][1][1]) for s in steps]


def stream(result: Mapping[str, Any]) -> list[Any]:
    """The generated ids, ending with a stop marker when a stop token ended them."""
    return list(result["ids"]) + ([STOP] if result["finish_reason"] == "stop_token" else [])


def compare_greedy(
    reference: Mapping[str, Any], got: Mapping[str, Any], tolerance: float, show: Any = repr
) -> tuple[str | None, str | None]:
    """(failure, near_tie): the first divergence of ``got`` from the reference
    stream, as a failure when the reference's margin there exceeds ``tolerance``,
    else as a near-tie note. Both None when the streams agree."""
    want, have = stream(reference), stream(got)
    n = min(len(want), len(have))
    i = next((k for k in range(n) if want[k] != have[k]), None)
    if i is None:
        if len(want) == len(have):
            return None, None
        i = n
    margin = reference["margins"][i] if i < len(reference["margins"]) else float("inf")
    where = first_divergence(want, have, show=show)
    if margin <= tolerance:
        return None, f"near-tie at step {i}: reference top-2 margin {margin:.5f} ≤ tolerance {tolerance}"
    return f"{where}\n  reference top-2 margin there: {margin:.4f} (> tie tolerance {tolerance})", None


def check_chunks(got: Mapping[str, Any]) -> str | None:
    """Streamed chunks, when the engine reports them, must concatenate to the final
    bytes (no held-back stop-string prefix leaked) and never split a character."""
    if "chunks" not in got:
        return None
    chunks = [bytes.fromhex(c) for c in got["chunks"]]
    final = bytes.fromhex(got["bytes"])
    if b"".join(chunks) != final:
        return f"streamed chunks {[c for c in chunks]} do not concatenate to the final bytes {final!r} (leaked output)"
    for k, chunk in enumerate(chunks[:-1] if ends_inside_character(final) else chunks):
        if ends_inside_character(chunk):
            return f"streamed chunk {k} {chunk!r} ends inside a UTF-8 character"
    return None


def ends_inside_character(data: bytes) -> bool:
    """Whether ``data`` ends with the incomplete start of a UTF-8 character, judged
    by CPython's incremental decoder (which holds such bytes back)."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    decoder.decode(data, final=False)
    return bool(decoder.getstate()[0])


def compare_stop_case(case: Mapping[str, Any], got: Mapping[str, Any]) -> str | None:
    """A stop-string case: exact bytes, finish reason and id count, then chunks."""
    want = case["expected"]
    have = {"bytes": got["bytes"], "finish_reason": got["finish_reason"], "n_ids": len(got["ids"])}
    if have != want:
        return (
            f"expected {bytes.fromhex(want['bytes'])!r} ({want['finish_reason']}, {want['n_ids']} ids), "
            f"engine gave {bytes.fromhex(have['bytes'])!r} ({have['finish_reason']}, {have['n_ids']} ids)"
        )
    return check_chunks(got)


class _Replay:
    """A logits source that makes the decode loop pick exactly the given tokens,
    one after another (each step's logits are 0 for the token, -1e4 elsewhere), then
    ``end`` for ever. ``asked`` counts the tokens the loop took."""

    def __init__(self, tokens: Sequence[int], end: int, n_vocab: int) -> None:
        self.tokens, self.end, self.n_vocab, self.asked = list(tokens), end, n_vocab, 0

    def _next(self) -> Any:
        import numpy as np

        token = self.tokens[self.asked] if self.asked < len(self.tokens) else self.end
        self.asked += 1
        row = np.full(self.n_vocab, -1e4, dtype=np.float32)
        row[token] = 0.0
        return row

    def prefill(self, ids: Sequence[int]) -> Any:
        return self._next()[None, :]

    def step(self, token: int) -> Any:
        return self._next()


def replay_stop_logic(
    case: Mapping[str, Any],
    got: Mapping[str, Any],
    piece: Any,
    stop_tokens: Sequence[int],
) -> str | None:
    """Judge the engine's stop logic on its own token stream: run the oracle's
    decode loop (stop tokens, stop strings on the byte stream, holdback, max tokens)
    over the ids the engine returned — followed by a stop token when the engine says
    one ended generation — and compare what the loop makes of them with the engine's
    bytes, finish reason, id count and streamed chunks. ``piece(id)`` gives a
    token's bytes. None when they agree."""
    from oracle import decode_loop

    ids = [int(i) for i in got["ids"]]
    end = stop_tokens[0] if got["finish_reason"] == "stop_token" else None
    n_vocab = max([*ids, *stop_tokens]) + 1
    source = _Replay(ids, end if end is not None else stop_tokens[0], n_vocab)
    params = {k: v for k, v in case["params"].items() if k in ("max_tokens", "stop", "top_candidates")}
    params["temperature"] = 0.0  # the replayed logits leave one candidate: the draw is irrelevant
    want = decode_loop.generate(source, piece, case["prompt"], params, stop_tokens)
    if end is None and source.asked > len(ids):
        return (
            f"the engine stopped after {len(ids)} tokens ({got['finish_reason']}) where the decode loop, "
            f"fed the engine's own tokens, would go on: {bytes.fromhex(got['bytes'])!r} holds no stop string "
            f"of {case['params'].get('stop')!r} and max_tokens is {case['params'].get('max_tokens')}"
        )
    have = {"bytes": got["bytes"], "finish_reason": got["finish_reason"], "n_ids": len(ids)}
    expected = {"bytes": want["bytes"], "finish_reason": want["finish_reason"], "n_ids": len(want["ids"])}
    if have != expected:
        return (
            f"on the engine's own tokens {ids} the decode loop gives {bytes.fromhex(expected['bytes'])!r} "
            f"({expected['finish_reason']}, {expected['n_ids']} ids); the engine gave "
            f"{bytes.fromhex(have['bytes'])!r} ({have['finish_reason']}, {have['n_ids']} ids)"
        )
    return check_chunks(got)


@functools.lru_cache(maxsize=4)  # the models a run walks one after another; each holds a vocabulary
def oracle_pieces(model: Any) -> tuple[Any, tuple[int, int]]:
    """(piece, stop tokens) of the model's vocabulary, read by the oracle (for the
    stop-logic replay only: the engine's stream is never compared with the oracle's)."""
    from impl.oracle import OracleEngine
    from oracle.dispatch import dispatch
    from oracle.gguf import open_gguf

    oracle = OracleEngine()
    special = dispatch(open_gguf(model.gguf)).special
    return (lambda token: oracle.decode(model, [token])), (special.eos, special.im_end)


def check(
    case: Mapping[str, Any], got: Mapping[str, Any], conformance_class: str, model: Any
) -> tuple[str | None, str | None]:
    """The generate gate's judgement of one case in one class: ``(failure, near_tie)``.

    A greedy case holds the engine to the class's reference stream (``compare_greedy``).
    A stop-string case first needs the stream to follow the reference: where it does,
    the known answer is compared (``compare_stop_case``); where it parts at a near tie,
    the engine's stop logic is replayed on its own tokens (``replay_stop_logic``), so a
    stop case always checks something; where it parts at a wide margin, it fails."""
    tolerance = CLASS_TIE_TOLERANCE[conformance_class]
    text = f"\n  engine text: {bytes.fromhex(got['bytes'])!r}"
    if "references" in case:
        name = CLASS_REFERENCE[conformance_class]
        failure, near_tie = compare_greedy(case["references"][name], got, tolerance)
        return (
            failure and f"engine departs from {name}'s greedy stream: {failure}{text}",
            near_tie and f"{name}: {near_tie}",
        )
    ref = case["reference"]
    diverge = first_difference(ref["ids"][: len(got["ids"])], got["ids"][: len(ref["ids"])])
    if diverge is None:
        problem = compare_stop_case(case, got)
        return problem and problem + text, None
    if ref["margins"][diverge] > tolerance:
        return (
            f"the stream departs from the reference at step {diverge}, where the reference's top-2 margin "
            f"{ref['margins'][diverge]:.4f} exceeds the {conformance_class} tie tolerance {tolerance}{text}"
        ), None
    piece, stop_tokens = oracle_pieces(model)
    problem = replay_stop_logic(case, got, piece, stop_tokens)
    return (
        problem and problem + text,
        f"stream parts from the reference at near-tie step {diverge}; stop logic replayed",
    )


def margin_drift(name: str, want: dict[str, Any], got: dict[str, Any], tolerance: float) -> str | None:
    """The largest move of a top-2 margin over the steps both streams take in the same
    context (up to and including the step where they part at a near tie)."""
    same = first_difference(want["ids"][: len(got["ids"])], got["ids"][: len(want["ids"])])
    n = min(len(want["margins"]), len(got["margins"]), len(want["ids"]) + 1 if same is None else same + 1)
    worst = max(range(n), key=lambda k: abs(want["margins"][k] - got["margins"][k]), default=None)
    if worst is not None and abs(want["margins"][worst] - got["margins"][worst]) > tolerance:
        return (
            f"{name}: top-2 margin at step {worst} moved {want['margins'][worst]:.4f} → "
            f"{got['margins'][worst]:.4f} (> {tolerance})"
        )
    return None


def generate_drift(model_id: str) -> snapshots.Drift:
    """Greedy streams and margins come out of floating-point forwards that differ in their
    last bits between CPUs: a stream may part from its snapshot only at a near tie, and a
    margin may move by less than the tie tolerance that the generate gate applies to it.
    Everything else (prompts, parameters, known stop answers) must not change at all."""

    def drift(case_id: str, stored: dict[str, Any], live: dict[str, Any]) -> str | None:
        if stored["prompt"] != live["prompt"] or stored["params"] != live["params"]:
            return snapshots.exact(case_id, stored, live)
        if "references" in stored:  # a greedy case
            for name, want in stored["references"].items():
                got, tolerance = live["references"][name], tie_tolerance(model_id, name)
                failure, _ = compare_greedy(want, got, tolerance)
                if failure:
                    return f"{name}: {failure}"
                if why := margin_drift(name, want, got, tolerance):
                    return why
            if ("disagreement" in stored) != ("disagreement" in live):
                return f"disagreement: snapshot {stored.get('disagreement')!r}, live {live.get('disagreement')!r}"
            return None
        if stored["expected"] != live["expected"] or stored["reference"]["ids"] != live["reference"]["ids"]:
            return snapshots.exact(case_id, stored, live)
        tolerance = max(tie_tolerance(model_id, name) for name in ("llamacpp", "transformers"))
        return margin_drift("agreed stream", stored["reference"], live["reference"], tolerance)

    return drift
