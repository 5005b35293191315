"""The tokenizer stage's inputs: ``corpus/texts/tokenizer.jsonl`` (one case per line:
id, category, text) and the vocabulary models the stage gates."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

CORPUS = Path(__file__).resolve().parent.parent / "corpus" / "texts" / "tokenizer.jsonl"

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
