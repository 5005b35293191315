"""The generate stage's catalogue: known deviations applied to the oracle's decode loop.

A deviation is a setting of one *knob* of the loop (``oracle.decode_loop``): stop strings
searched in each token's piece instead of the byte stream, the stop string kept in the
output, each piece decoded through a string (a partial UTF-8 character becomes U+FFFD),
streamed chunks not held back at a partial character, one token fewer than ``max_tokens``
(one more is no failure to diagnose: the ``cmd:`` client rejects an answer longer than
``max_tokens`` as malformed, outcome error, naming the bound). None of
them changes which token the sampler picks, so the oracle's token stream is computed once
per case (one more token than ``max_tokens``, no stop strings) and ``loop`` below — the
decode loop's own steps with the knobs applied — replays it; with no knobs its answer is
the oracle's (``tests/diagnose`` checks that on every recorded case). Inputs are the
gate's own: ``{"prompt", "params"}`` of a generate snapshot case.

Answers are compared on what the generate gate reads: ids, bytes, finish reason, and the
streamed chunks when the engine reports them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from oracle.decode_loop import LOOP_DEFAULTS, find_stop, stop_prefix_start
from oracle.utf8 import complete_utf8_prefix_len
from specgate.diagnose.tokenizer import Hypothesis, _h

#: What the evidence of a diagnosis says the deviated answers were compared with.
REFERENCE = "the oracle's decode loop (which agrees with llama.cpp and transformers)"
GENERATE_ROWS = "generate/exact,generate/quantized"


def loop(
    tokens: Sequence[int],
    piece: Callable[[int], bytes],
    params: Mapping[str, Any],
    stop_tokens: Sequence[int],
    knobs: Mapping[str, Any],
) -> dict[str, Any]:
    """``oracle.decode_loop.generate``'s stop, append and stream steps over the sampled
    ``tokens``, with the deviations ``knobs`` applied."""
    max_tokens = params.get("max_tokens", LOOP_DEFAULTS["max_tokens"]) + knobs.get("max_tokens_offset", 0)
    stops = [s.encode("utf-8") if isinstance(s, str) else bytes(s) for s in params.get("stop", [])]
    ids: list[int] = []
    stream, emitted, chunks, finish = b"", 0, [], "length"
    for token in tokens[: max(0, max_tokens)]:
        if token in stop_tokens:
            finish = "stop_token"
            break
        ids.append(token)
        bytes_ = piece(token)
        if knobs.get("pieces_as_text"):  # each piece through a str: partial characters become U+FFFD
            bytes_ = bytes_.decode("utf-8", "replace").encode("utf-8")
        stream += bytes_
        if knobs.get("stop_per_token"):  # only the newest piece is searched
            at = find_stop(bytes_, stops)
            cut = None if at is None else len(stream) - len(bytes_) + at
        else:
            cut = find_stop(stream, stops)
        if cut is not None:
            if knobs.get("stop_string_kept"):
                cut += max(len(s) for s in stops if s and stream.startswith(s, cut))
            stream = stream[:cut]
            finish = "stop_string"
            break
        utf8_end = (
            len(stream) if knobs.get("no_holdback") else emitted + complete_utf8_prefix_len(stream[emitted:])
        )
        limit = max(emitted, min(utf8_end, stop_prefix_start(stream, stops)))
        if limit > emitted:
            chunks.append(stream[emitted:limit])
            emitted = limit
    if len(stream) > emitted:
        chunks.append(stream[emitted:])
    return {"ids": ids, "bytes": stream.hex(), "finish_reason": finish, "chunks": [c.hex() for c in chunks]}


@dataclass(eq=False)
class GenerateAnswer:
    """What the generate gate reads of a result: for a greedy case (no stop strings) the
    token stream only; for a stop case the bytes too, and the chunks when both report them."""

    ids: list[int]
    bytes: str
    finish_reason: str
    chunks: list[str] | None

    @classmethod
    def of(cls, result: Mapping[str, Any], inp: Mapping[str, Any]) -> GenerateAnswer:
        if not inp["params"].get("stop"):
            return cls(list(result["ids"]), "", str(result["finish_reason"]), None)
        chunks = result.get("chunks")
        return cls(list(result["ids"]), str(result["bytes"]), str(result["finish_reason"]), chunks)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, GenerateAnswer):
            return NotImplemented
        same = (self.ids, self.bytes, self.finish_reason) == (other.ids, other.bytes, other.finish_reason)
        return same and (self.chunks is None or other.chunks is None or self.chunks == other.chunks)

    __hash__ = None  # type: ignore[assignment]


@dataclass
class ModelStreams:
    """The oracle's decode loop of one model: its pieces, stop tokens and, per case, the
    sampled token stream (bounded by the model's recorded generate cases)."""

    model: Any
    piece: Callable[[int], bytes]
    stop_tokens: tuple[int, ...]
    _tokens: dict[str, list[int]] = field(default_factory=dict)

    def tokens(self, inp: Mapping[str, Any]) -> list[int]:
        """The oracle's sampled tokens for the case: ``max_tokens`` + 1 of them (the stop
        token that ended them last), stop strings ignored."""
        key = repr((list(inp["prompt"]), sorted(inp["params"].items())))
        if key not in self._tokens:
            from impl.oracle import OracleEngine

            params = {**inp["params"], "stop": [], "top_candidates": 2}
            params["max_tokens"] = params.get("max_tokens", LOOP_DEFAULTS["max_tokens"]) + 1
            out = OracleEngine().generate(self.model, list(inp["prompt"]), params)
            self._tokens[key] = (
                [*out["ids"], *self.stop_tokens[:1]] if out["finish_reason"] == "stop_token" else out["ids"]
            )
        return self._tokens[key]


def answer(stage: str, m: ModelStreams, inp: Mapping[str, Any], knobs: Mapping[str, Any]) -> GenerateAnswer:
    """The oracle's generation on ``inp`` with the deviations ``knobs`` applied."""
    return GenerateAnswer.of(loop(m.tokens(inp), m.piece, inp["params"], m.stop_tokens, knobs), inp)


def applies(stage: str, m: Any, inp: Mapping[str, Any], knobs: Mapping[str, Any]) -> bool:
    """Stop-string deviations show only where the case has stop strings."""
    stop_knobs = ("stop_per_token", "stop_string_kept")
    return bool(inp["params"].get("stop")) or not any(knobs.get(k) for k in stop_knobs)


# ---------------------------------------------------------------------------
# the catalogue

CATALOGUE: tuple[Hypothesis, ...] = (
    *_h(
        "stop_per_token", GENERATE_ROWS,
        "does not see a stop string that straddles two tokens: it searches each token's piece "
        "(or nothing), not the byte stream",
        stop_per_token=True,
    ),
    *_h(
        "stop_string_kept", GENERATE_ROWS,
        "keeps the stop string in the output; the output ends where the stop string begins",
        stop_string_kept=True,
    ),
    *_h(
        "pieces_as_text", GENERATE_ROWS,
        "decodes each token's piece through a string: the bytes of a character split across tokens "
        "become U+FFFD (no UTF-8 holdback)",
        pieces_as_text=True,
    ),
    *_h(
        "no_holdback", GENERATE_ROWS,
        "streams a chunk that ends inside a UTF-8 character (no holdback of a partial character)",
        no_holdback=True,
    ),
    *_h(
        "max_tokens_minus_one", GENERATE_ROWS,
        "generates max_tokens − 1 tokens (an off-by-one in the length limit)",
        max_tokens_offset=-1,
    ),
)  # fmt: skip


@functools.lru_cache(maxsize=2)  # a run's exact and quantized rows share the model's streams
def reference(model: Any) -> ModelStreams:
    """The oracle's decode loop of ``model``."""
    from specgate.checks.generate import oracle_pieces

    piece, stop_tokens = oracle_pieces(model)
    return ModelStreams(model, piece, tuple(stop_tokens))


def case_input(record: Any) -> dict[str, Any] | None:
    """A generate record's input, from the snapshot it was gated on."""
    from specgate.upkeep.recorded_cases import recorded_case

    case = recorded_case(record, "generate")  # under the snapshot root the record carries
    if not isinstance(case, Mapping) or "prompt" not in case:
        return None
    return {"prompt": list(case["prompt"]), "params": dict(case["params"])}


def ask(engine: Any, stage: str, model: Any, inp: Mapping[str, Any]) -> GenerateAnswer:
    """The engine's generation on ``inp`` (an exception where it refuses)."""
    from specgate.checks.generate import well_formed
    from specgate.outcomes.gate import call

    return GenerateAnswer.of(well_formed(call(engine, "generate", model, inp["prompt"], inp["params"])), inp)
