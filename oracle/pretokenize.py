"""Pre-tokenization: cutting text into pieces that BPE merges never cross.

The rule is named by ``tokenizer.ggml.pre``. Qwen2/2.5/3 and DeepSeek-R1-Distill
(``qwen2``, ``deepseek-r1-qwen``) use the regex shipped in their tokenizer.json::

    (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+

Qwen3.5/3.6 (``qwen35``) is the same with combining marks counted as letters:
``[\\p{L}\\p{M}]+`` in the word arm and ``\\p{M}`` excluded from the punctuation arm.

The regex is applied with ``findall``: at each position the alternatives are
tried in order and the first that matches wins. Here that is written out as a
scan — each alternative is one small function returning where its match ends —
so what each arm does (and what dropping one would change) is visible, and the
CPython ``regex`` run of the pattern string is an independent check of it.

Every character falls into one class, computed once per character:

    L  letter (``\\p{L}``; for qwen35 also ``\\p{M}``)   N  number (``\\p{N}``)
    R  carriage return or line feed                      S  the space U+0020
    W  other whitespace (``\\s``)                          P  anything else

Every class starts some arm, so the pieces always tile the text exactly.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import regex

WHITESPACE = "SWR"
_IS_SPACE = regex.compile(r"\s")
_IS_LETTER = regex.compile(r"\p{L}")
_IS_MARK = regex.compile(r"\p{M}")
_IS_NUMBER = regex.compile(r"\p{N}")


class CharClasses(dict):
    """code point -> class letter, filled on first sight (a ``str.translate`` table)."""

    def __init__(self, marks_are_letters: bool) -> None:
        super().__init__()
        self.marks_are_letters = marks_are_letters

    def __missing__(self, codepoint: int) -> str:
        ch = chr(codepoint)
        if ch in "\r\n":
            cls = "R"
        elif ch == " ":
            cls = "S"
        elif _IS_SPACE.match(ch):
            cls = "W"
        elif _IS_LETTER.match(ch) or (self.marks_are_letters and _IS_MARK.match(ch)):
            cls = "L"
        elif _IS_NUMBER.match(ch):
            cls = "N"
        else:
            cls = "P"
        self[codepoint] = cls
        return cls


@dataclass(frozen=True)
class Rule:
    name: str
    classes: CharClasses


QWEN2 = Rule("qwen2", CharClasses(marks_are_letters=False))
QWEN35 = Rule("qwen35", CharClasses(marks_are_letters=True))
RULES: dict[str, Rule] = {"qwen2": QWEN2, "deepseek-r1-qwen": QWEN2, "qwen35": QWEN35}


# The end of a run of characters whose classes are in a set: ``re`` over the class
# letters (a plain character-run search, not the tokenizer's pattern).
_RUNS = {members: re.compile(f"[{members}]*").match for members in ("L", "P", "R", WHITESPACE)}


def _run_end(cls: str, i: int, members: str) -> int:
    """First position at or after ``i`` whose class is not in ``members``."""
    return _RUNS[members](cls, i).end()


# --- the alternatives, in the pattern's order -------------------------------------
# Each takes (text, classes, position) and returns the end of its match, or None.
# ``starts_on`` names the classes of the characters it can begin with, so the scan
# only asks the arms that could match (the order among them is the pattern's).

Arm = Callable[[str, str, int], "int | None"]


def starts_on(classes: str) -> Callable[[Arm], Arm]:
    def mark(arm: Arm) -> Arm:
        arm.starts_on = classes  # type: ignore[attr-defined]
        return arm

    return mark


CONTRACTIONS = ("s", "t", "re", "ve", "m", "ll", "d")


@starts_on("P")
def contraction(text: str, cls: str, i: int) -> int | None:
    """``(?i:'s|'t|'re|'ve|'m|'ll|'d)`` — compared case-insensitively by Unicode
    simple case folding, as the regex engines do (so ``'ſ`` counts as ``'s``)."""
    if text[i] != "'":
        return None
    for suffix in CONTRACTIONS:
        end = i + 1 + len(suffix)
        if end <= len(text) and all(
            c.casefold() == s for c, s in zip(text[i + 1 : end], suffix, strict=True)
        ):
            return end
    return None


@starts_on("LSWP")
def word(text: str, cls: str, i: int) -> int | None:
    """``[^\\r\\n\\p{L}\\p{N}]?\\p{L}+`` — a run of letters, with one leading
    character that is neither a line break, a letter nor a number glued on
    (a space, a tab, or punctuation such as the ``(`` of ``(hello``)."""
    start = i + 1 if cls[i] in "SWP" and i + 1 < len(cls) and cls[i + 1] == "L" else i
    if cls[start] != "L":
        return None
    return _run_end(cls, start, "L")


@starts_on("N")
def digit(text: str, cls: str, i: int) -> int | None:
    """``\\p{N}`` — exactly one number character: ``2024`` is four pieces."""
    return i + 1 if cls[i] == "N" else None


@starts_on("PS")
def punctuation(text: str, cls: str, i: int) -> int | None:
    """`` ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*`` — a run of symbols with an optional
    leading space, swallowing the line breaks right after it."""
    start = i + 1 if cls[i] == "S" and i + 1 < len(cls) and cls[i + 1] == "P" else i
    if cls[start] != "P":
        return None
    return _run_end(cls, _run_end(cls, start, "P"), "R")


@starts_on("SWR")
def line_breaks(text: str, cls: str, i: int) -> int | None:
    """``\\s*[\\r\\n]+`` — whitespace up to and including the last line break of
    the whitespace run (the greedy ``\\s*`` backs off to the last ``\\r``/``\\n``)."""
    if cls[i] not in WHITESPACE:
        return None
    last = cls.rfind("R", i, _run_end(cls, i, WHITESPACE))
    return last + 1 if last != -1 else None


@starts_on("SWR")
def trailing_space(text: str, cls: str, i: int) -> int | None:
    """``\\s+(?!\\S)`` — a whitespace run that is not followed by a non-space:
    all of it at the end of the text, otherwise all but its last character,
    which is left to glue onto the next word (``"a   b"`` -> ``a``, ``"  "``, ``" b"``)."""
    if cls[i] not in WHITESPACE:
        return None
    end = _run_end(cls, i, WHITESPACE)
    if end == len(cls):
        return end
    return end - 1 if end - 1 > i else None


@starts_on("SWR")
def whitespace(text: str, cls: str, i: int) -> int | None:
    """``\\s+`` — what is left: a single whitespace character before a non-space."""
    return _run_end(cls, i, WHITESPACE) if cls[i] in WHITESPACE else None


ARMS: tuple[Arm, ...] = (contraction, word, digit, punctuation, line_breaks, trailing_space, whitespace)


def split(text: str, rule: Rule, arms: Sequence[Arm] | None = None) -> list[str]:
    """The pieces of ``text`` under ``rule``; they concatenate back to ``text``.
    ``arms`` replaces the pattern's alternatives (``ARMS``), e.g. to try a deviation."""
    cls = text.translate(rule.classes)
    arms_for = {c: [arm for arm in (ARMS if arms is None else arms) if c in arm.starts_on] for c in "LNPSWR"}
    pieces = []
    i, n = 0, len(text)
    while i < n:
        for arm in arms_for[cls[i]]:
            end = arm(text, cls, i)
            if end is not None:
                break
        else:  # unreachable with the full rule: every class starts some arm
            raise AssertionError(f"no pre-tokenizer arm matches {text[i]!r} at {i}")
        pieces.append(text[i:end])
        i = end
    return pieces
