"""The tokenizer stage's comparisons: pre-tokenizer pieces (split), token ids
(encode) and bytes (decode), each answering with the first divergence.

One classification of Unicode-version skew serves split and encode: a text holding
code points that older Unicode data leaves unassigned (general category ``Cn`` in
Python's ``unicodedata``, whose data is older than CPython ``regex``'s) is split by
letter/number rules that depend on the Unicode version an engine's tables follow.
An engine following older tables (Node 20, Python's ``unicodedata``, an older
``regex``) and the reference following newer ones may both be right. The split and
encode snapshots record such a case when they are made
(``tests/references/test_tokenizer.py``), with the other reference's answer (HF
tokenizers' pieces; llama.cpp's merges over the regex pieces), and the gates judge
an answer by those (``specgate.outcomes.judge``): matching neither fails. ``check_split``'s
own disagreement serves triage's replays of new inputs, which have no recorded
answers.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Sequence
from typing import Any

from specgate.outcomes.gate import first_difference, first_divergence
from specgate.outcomes.judge import settle

#: The reference that judges each stage in the gate (named in its messages); a re-check
#: on a new input is judged by the oracle instead and says so (``specgate.run.triage``).
SPLIT_REFERENCE = "regex.findall of the tokenizer-file pattern"
ENCODE_REFERENCE = "llama_tokenize"
DECODE_REFERENCE = "concatenated llama_token_to_piece"
ORACLE = "the oracle"


def unicode_version_skew(text: str) -> str | None:
    """Why ``text`` is split differently under other Unicode versions, or None: the
    code points in it that older Unicode data leaves unassigned."""
    from importlib.metadata import version

    new = sorted({f"U+{ord(ch):04X}" for ch in text if unicodedata.category(ch) == "Cn"})
    if not new:
        return None
    return (
        f"code points unassigned in older Unicode data (Python's unicodedata {unicodedata.unidata_version}) "
        f"but classified by regex {version('regex')}: {', '.join(new)} — Unicode-version skew"
    )


def excerpt(text: str, at: int, width: int = 24) -> str:
    return repr(text[max(0, at - width) : at + width])


def check_split(
    text: str,
    expected: Sequence[str],
    got: Sequence[str],
    reference: str = SPLIT_REFERENCE,
    skew: bool = True,
) -> tuple[str | None, str | None]:
    """``(failure, disagreement)`` for the engine's pieces ``got`` of ``text`` against
    the reference's: pieces must tile the text and equal the reference's; a
    difference in a text with Unicode-version skew is a disagreement instead — unless
    ``skew`` is False (the gate, whose snapshot records the other reference's pieces)."""
    joined = "".join(got)
    if joined != text:
        return (
            f"pieces do not tile the input; they join to {excerpt(joined, 0)} (length {len(joined)}) "
            f"for {excerpt(text, 0)} (length {len(text)})"
        ), None
    i = first_difference(list(expected), list(got))
    if i is None:
        return None, None
    if skew and (why := unicode_version_skew(text)):
        return None, f"the engine's split differs from CPython regex's in {text[:60]!r}; {why}"
    offset = sum(len(p) for p in expected[:i])  # the pieces before the first difference are equal
    return (
        f"pieces differ from {reference} at text offset {offset} "
        f"({excerpt(text, offset)})\n{first_divergence(expected, got)}"
    ), None


def check_encode(
    case: dict[str, Any],
    got: Sequence[int],
    show: Callable[[int], str] = repr,
    reference: str = ENCODE_REFERENCE,
) -> str | None:
    """The encode comparison: ``case`` = ``{"text", "parse_special", "ids"}``."""
    where = first_divergence(case["ids"], list(got), show=show)
    if where is None:
        return None
    return f"ids differ from {reference} on text {excerpt(case['text'], 0, 40)}\n{where}"


def check_decode(expected: bytes, got: bytes, reference: str = DECODE_REFERENCE) -> str | None:
    at = first_difference(expected, got)
    if at is None:
        return None
    return (
        f"bytes differ from {reference} at byte {at} (reference length "
        f"{len(expected)}, engine length {len(got)})\n"
        f"  reference: {expected[max(0, at - 16) : at + 16]!r}\n  engine:    {got[max(0, at - 16) : at + 16]!r}"
    )


def piece_of(model: Any) -> Callable[[int], str]:
    """Render a token id as the bytes it stands for (display only; via the oracle's
    table), or plain ``repr`` when the oracle cannot read the model."""
    from impl.oracle import OracleEngine

    try:
        oracle = OracleEngine()
        oracle.decode(model, [])
    except Exception:
        return repr
    return lambda i: repr(oracle.decode(model, [i]))


def settle_case(stage: str, model: Any, case: dict[str, Any], got: Any, where: str) -> None:
    """The tokenizer gates' verdict on the engine's answer ``got`` to a recorded ``case``
    of ``stage`` (split, encode or decode): its comparison with the case's references,
    the field each reference's answer is recorded in, settled by ``specgate.outcomes.judge``
    (a pass returns; a disagreement or failure raises, prefixed with ``where``)."""
    compare, answer_key = {
        # the split snapshot records the other reference's pieces: no skew rule of its own
        "split": (lambda c: check_split(c["text"], c["pieces"], got, skew=False)[0], "pieces"),
        "encode": (lambda c: check_encode(c, got, show=piece_of(model)), "ids"),
        "decode": (lambda c: check_decode(bytes.fromhex(c["hex"]), got), "hex"),
    }[stage]
    settle(stage, case, compare, where, answer_key)
