"""Signatures: what groups findings by root cause (``specgate.run.triage``).

A record's *message signature* is its stage, its outcome and the first line of its
message with the case's own details masked (``kind``): two cases of one defect give
one. An undiagnosed record whose bounded answers were kept (``specgate.run.case_answers``)
adds where its first divergence falls (``specgate.run.divergence_site``): one message
template, two places (a whitespace run, a digit run) make two groups, each shrunk to
its own reproducer. The masked signature is a grouping key only; headings show the
real first message and the site, never a mask.
"""

from __future__ import annotations

import re
from typing import Any

_QUOTED = re.compile(r"""[bB]?'(?:[^'\\\n]|\\.)*'|[bB]?"(?:[^"\\\n]|\\.)*\"""")
# A number stands alone: one inside an identifier or a hex run (``sha256``, ``f4bc6a0``,
# ``qwen2``) is part of a name, never partly masked. Hex digests are masked whole.
_HEX = re.compile(r"(?<!\w)(?=[0-9a-fA-F]*\d)[0-9a-fA-F]{7,}(?!\w)")
_NUMBER = re.compile(r"(?<!\w)[-+]?(?:0x[0-9a-fA-F]+|\d+(?:\.\d+)?(?:e[-+]?\d+)?)(?!\w)")
_REFERENCE_NAMES = (
    "regex.findall of the tokenizer-file pattern",
    "concatenated llama_token_to_piece",
    "llama_tokenize",
    "transformers",
    "the oracle",
)
_PARENS = re.compile(r"\([^()]*\)")
_RUNS = re.compile(r"N(?:[,\s=]*N)+")


def kind(message: str, model: str = "", case: str = "") -> str:
    """The divergence kind of a message: its first line with the case's details
    masked — the model and case ids, quoted text (``<q>``), numbers (``N``) and
    parenthesized details (``(…)``) — and the gate's ``where: `` prefix (the part
    naming the case) dropped. Two cases of one defect give one kind; the message of
    a re-check (which has no prefix) gives the same kind as the gate's."""
    text = message.strip()
    for literal, mask in ((case, "<case>"), (model, "<model>")):
        if literal:
            text = text.replace(literal, mask)
    for name in _REFERENCE_NAMES:  # the gate's reference or the oracle judged: one kind
        text = text.replace(f" from {name}", " from <reference>")
    lines = [line for line in text.splitlines() if line.strip()]
    line = _QUOTED.sub("<q>", lines[0] if lines else "")
    line = _NUMBER.sub("N", _HEX.sub("<hex>", line))
    while _PARENS.search(line):  # innermost first; the mask itself has no parentheses
        line = _PARENS.sub("\ue000", line)
    line = line.replace("\ue000", "(…)")
    line = _RUNS.sub("N…", line)
    head, sep, rest = line.partition(": ")
    if sep and ("<case>" in head or "<model>" in head):
        line = rest
    return " ".join(line.split())


def signature(stage: str, outcome: str, message: str, model: str = "", case: str = "") -> str:
    return f"{stage} · {outcome} · {kind(message, model, case)}"


def message_signature(record: Any) -> str:
    """The record's signature from its message alone (what a shrunk input must still show)."""
    return signature(record.stage, record.outcome, record.message, record.model, getattr(record, "case", ""))


def record_signature(record: Any) -> str:
    """The grouping key: the message signature, and where the divergence falls when known."""
    where = (getattr(record, "answers", None) or {}).get("site")
    return f"{message_signature(record)} · {where}" if where else message_signature(record)
