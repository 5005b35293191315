"""The tokenizer stage's inputs: ``corpus/texts/tokenizer.jsonl`` (one case per line:
id, category, text), ``corpus/texts/decode.jsonl`` (id sequences no text encodes to:
special ids on their own, bytes ending or breaking inside a character) and the
vocabulary models the stage gates."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

CORPUS = Path(__file__).resolve().parent.parent / "corpus" / "texts" / "tokenizer.jsonl"
DECODE_CORPUS = CORPUS.with_name("decode.jsonl")
DECODE_PREFIX = "ids-"  # decode case ids from DECODE_CORPUS: ids-<id>, apart from the text ids

# Every manifest model with a vocabulary the tokenizer stage covers.
TOKENIZER_MODELS = (
    "qwen2.5-coder-0.5b-instruct",
    "deepseek-r1-distill-qwen-7b-vocab",
    "qwen3-vocab",
    "qwen3.6-vocab",
)
MODES = {"plain": False, "special": True}  # encode case suffix -> parse_special


@cache
def cases() -> dict[str, dict[str, str]]:
    """case id -> {"category", "text"}, in file order."""
    out = {}
    for line in CORPUS.read_text(encoding="utf-8").split("\n"):  # not splitlines: texts hold U+2028
        if line.strip():
            case = json.loads(line)
            out[case["id"]] = {"category": case["category"], "text": case["text"]}
    return out


@cache
def decode_cases() -> dict[str, list[dict[str, str]]]:
    """case id -> its parts, in file order. Each part is one kind of ids, resolved per
    model by the reference tokenizer (llama.cpp) when the decode snapshot is recorded:

    * ``{"text": s}`` — the ids of ``s`` without special-token parsing;
    * ``{"special": s}`` — the one id ``s`` is with special-token parsing (a model
      without that token does not get the case);
    * ``{"head": s}`` / ``{"tail": s}`` — the first id of ``s`` / the ids after it, where
      the first id's bytes end inside a character of ``s``.
    """
    out = {}
    for line in DECODE_CORPUS.read_text(encoding="utf-8").split("\n"):
        if line.strip():
            case = json.loads(line)
            out[DECODE_PREFIX + case["id"]] = case["parts"]
    return out
