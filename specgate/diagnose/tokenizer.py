"""The tokenizer stages' catalogue: known deviations applied to the oracle's tokenizer.

A deviation is a setting of one *knob* of the pipeline — the text's normalization, one
alternative of the pre-tokenizer, how special tokens are scanned, a BOS or EOS added,
how decode treats partial characters, fillers and control tokens. ``answer`` runs the
oracle's tokenizer with any set of knobs, so two deviations compose (an engine with
two defects); with none it is the oracle's own answer. Inputs are the gates' own:
``{"text"}`` for split, ``{"text", "parse_special"}`` for encode, ``{"ids"}`` for decode.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from oracle import pretokenize
from oracle.tokenizer import Tokenizer


@dataclass(frozen=True)
class Hypothesis:
    name: str  # a short id: "nfc"
    stage: str  # split, encode or decode
    cause: str  # what the engine does, as a finding's heading says it
    knobs: tuple[tuple[str, Any], ...]  # the deviation: knob settings for ``answer``


@dataclass
class ModelTokenizer:
    """The oracle's tokenizer of one model, with what the deviations need."""

    tok: Tokenizer
    bos: int | None
    eos: int | None

    @property
    def control_ids(self) -> set[int]:
        return set(self.tok.parsed.ids.values()) - set(self.tok.always.ids.values())


# ---------------------------------------------------------------------------
# the pre-tokenizer's alternatives, one deviation at a time


def _digits_in_threes(text: str, cls: str, i: int) -> int | None:
    """``\\p{N}{1,3}`` (the cl100k / Llama 3 rule) where Qwen has ``\\p{N}``."""
    if cls[i] != "N":
        return None
    end = i
    while end < len(cls) and end - i < 3 and cls[end] == "N":
        end += 1
    return end


_digits_in_threes.starts_on = "N"  # type: ignore[attr-defined]


def _replace(arm: Any, by: Any | None) -> tuple[Any, ...]:
    return tuple(by if a is arm else a for a in pretokenize.ARMS if not (a is arm and by is None))


ARMS = {
    "whitespace_run_whole": _replace(pretokenize.trailing_space, None),
    "digits_in_threes": _replace(pretokenize.digit, _digits_in_threes),
}


# ---------------------------------------------------------------------------
# the pipeline with knobs


def answer(stage: str, m: ModelTokenizer, inp: Mapping[str, Any], knobs: Mapping[str, Any]) -> Any:
    """The oracle's answer to ``inp`` with the deviations ``knobs`` applied."""
    if stage == "decode":
        return _decode(m, inp["ids"], knobs)
    text = inp["text"]
    if knobs.get("normalize"):
        text = unicodedata.normalize(knobs["normalize"], text)
    arms = ARMS[knobs["arms"]] if knobs.get("arms") else None
    if stage == "split":
        return pretokenize.split(text, m.tok.rule, arms)
    parse_special = {"plain_parsed": True, "not_parsed": False}.get(
        knobs.get("specials", ""), inp["parse_special"]
    )
    scanner = m.tok.parsed if parse_special else m.tok.always
    ids: list[int] = [m.bos] if knobs.get("bos") and m.bos is not None else []
    for segment, special_id in scanner.segments(text):
        if special_id is not None:
            ids.append(special_id)
        else:
            for piece in pretokenize.split(segment, m.tok.rule, arms):
                ids.extend(m.tok.encode_piece(piece))
    if knobs.get("eos") and m.eos is not None:
        ids.append(m.eos)
    return ids


def _decode(m: ModelTokenizer, ids: Sequence[int], knobs: Mapping[str, Any]) -> bytes:
    n, control = len(m.tok.tokens), m.control_ids
    out = b""
    for i in ids:
        if not 0 <= i < n:
            continue
        if i in control and knobs.get("control_omitted"):
            continue
        if i in m.tok.silent and knobs.get("unused_as_text"):
            out += m.tok.tokens[i].encode("utf-8")
        else:
            out += m.tok.decode_bytes([i])
    if knobs.get("utf8_replacement"):
        out = out.decode("utf-8", "replace").encode("utf-8")
    return out


def applies(stage: str, m: ModelTokenizer, inp: Mapping[str, Any], knobs: Mapping[str, Any]) -> bool:
    """Whether the deviation can show on this input at all (BOS on a model without one,
    plain-text parsing on a case that parses specials, … cannot)."""
    if knobs.get("specials") == "plain_parsed" and inp.get("parse_special"):
        return False
    if knobs.get("specials") == "not_parsed" and not inp.get("parse_special"):
        return False
    return not ((knobs.get("bos") and m.bos is None) or (knobs.get("eos") and m.eos is None))


# ---------------------------------------------------------------------------
# the catalogue


def _h(name: str, stages: str, cause: str, **knobs: Any) -> list[Hypothesis]:
    return [Hypothesis(name, stage, cause, tuple(sorted(knobs.items()))) for stage in stages.split(",")]


def of_stage(catalogue: Sequence[Hypothesis], stage: str) -> list[Hypothesis]:
    """The hypotheses of a module's ``catalogue`` that explain failures of ``stage``."""
    return [h for h in catalogue if h.stage == stage]


CATALOGUE: tuple[Hypothesis, ...] = (
    *_h("nfc", "split,encode", "normalizes the text to NFC first", normalize="NFC"),
    *_h("nfkc", "split,encode", "normalizes the text to NFKC first", normalize="NFKC"),
    *_h(
        "whitespace_run_whole", "split,encode",
        "takes a whitespace run before a word whole: its pre-tokenizer lacks \\s+(?!\\S), "
        "so the run's last space does not glue onto the word",
        arms="whitespace_run_whole",
    ),
    *_h(
        "digits_in_threes", "split,encode",
        "groups up to three digits (\\p{N}{1,3}, the cl100k/Llama 3 rule) where Qwen splits every digit",
        arms="digits_in_threes",
    ),
    *_h(
        "specials_in_plain_text", "encode",
        "parses control tokens in plain-text mode (parse_special false): <|im_start|> in a user's text becomes one id",
        specials="plain_parsed",
    ),
    *_h(
        "specials_not_parsed", "encode",
        "does not parse control tokens when parse_special is true: it encodes them as text",
        specials="not_parsed",
    ),
    *_h("bos_added", "encode", "adds a BOS token in front (encode never adds one, PROTOCOL §4.2)", bos=True),
    *_h("eos_added", "encode", "adds an EOS token at the end (encode never adds one, PROTOCOL §4.2)", eos=True),
    *_h(
        "utf8_replacement", "decode",
        "decodes through a string: the bytes of an incomplete UTF-8 character become U+FFFD",
        utf8_replacement=True,
    ),
    *_h(
        "unused_as_text", "decode",
        "decodes unused and other non-text token types (the [PAD…] fillers) as their text; they decode to no bytes",
        unused_as_text=True,
    ),
    *_h(
        "control_omitted", "decode",
        "decodes control tokens (<|im_end|>, …) to no bytes; they decode as their text",
        control_omitted=True,
    ),
)  # fmt: skip


def reference(model: Any) -> ModelTokenizer:
    """The oracle's tokenizer of ``model``."""
    return model_tokenizer(model.gguf)


def ask(engine: Any, stage: str, model: Any, inp: Mapping[str, Any]) -> Any:
    """The engine's answer to ``inp`` (an exception where it refuses)."""
    from specgate.outcomes.gate import call

    if stage == "split":
        return list(call(engine, "split", model, inp["text"]))
    if stage == "encode":
        return list(call(engine, "encode", model, inp["text"], inp["parse_special"]))
    return bytes(call(engine, "decode", model, inp["ids"]))


def model_tokenizer(gguf_path: Any) -> ModelTokenizer:
    from oracle.dispatch import dispatch
    from oracle.gguf import open_gguf

    gguf = open_gguf(gguf_path, header_only=True)
    special = dispatch(gguf).special
    return ModelTokenizer(Tokenizer.from_gguf(gguf), special.bos, special.eos)
