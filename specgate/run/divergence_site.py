"""Where a first divergence falls, in words: the kind of reference token or piece it
falls in, the class of the character there and the kind of position. Two failing
cases of one message template whose divergences fall in different places (a
whitespace run before a word, a digit run, a decomposed accent) are told apart by it
(``specgate.run.signatures``), so each gets its own group and reproducer.

Everything here reads the case's own text and the reference's answer; nothing is
masked, so a group heading built from it never shows a masking placeholder.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Sequence

from specgate.outcomes.gate import first_difference

_SPECIAL = re.compile(r"<\|[^|<>]+\|>|</?think>|<｜[^｜]+｜>|<\|?[a-z_]+\|?>")


def char_class(ch: str | None) -> str:
    """A character's class as an engine author would name it."""
    if ch is None:
        return "the end of the text"
    named = {"\n": "a newline", "\r": "a carriage return", " ": "a space", "\t": "a tab"}
    if ch in named:
        return named[ch]
    if ch.isspace():
        return "other whitespace"
    cat = unicodedata.category(ch)
    ascii_ = "an ASCII" if ch.isascii() else "a non-ASCII"
    if cat[0] == "M":
        return "a combining mark"
    if cat == "Nd":
        return f"{ascii_} digit"
    if cat[0] == "N":
        return "another number character"
    if cat[0] == "L":
        return f"{ascii_} letter"
    if cat[0] == "P":
        return f"{ascii_} punctuation"
    if cat[0] == "S":
        return "a symbol"
    if cat == "Cn":
        return "an unassigned code point"
    return "a control or format character"


def token_kind(piece: str | None) -> str:
    """The kind of a reference piece or token text: where in the text's structure the
    divergence falls."""
    if piece is None:
        return "past the last reference token"
    if piece == "":
        return "a token with no text (a control token)"
    if _SPECIAL.fullmatch(piece):
        return "a special token"
    if piece.isspace():
        return "a newline run" if "\n" in piece else "a whitespace run"
    body = piece[1:] if piece[:1] in (" ", "Ġ") and len(piece) > 1 else piece
    lead = "a space-led " if body is not piece else "a "
    if all(unicodedata.category(c)[0] == "N" for c in body):
        return lead + "number"
    if body.isalpha():
        return lead + "word"
    if "'" in body or "’" in body:
        return lead + "contraction"
    if all(unicodedata.category(c)[0] in "PS" for c in body):
        return lead + "punctuation run"
    return lead + "mixed piece"


def position_kind(text: str, at: int) -> str:
    if at <= 0:
        return "at the start"
    if at >= len(text):
        return "at the end"
    before, ch = text[at - 1], text[at]
    if before == "\n":
        return "at a line start"
    wordy = lambda c: c.isalnum() or unicodedata.category(c)[0] == "M"  # noqa: E731 — marks are in words
    if wordy(before) and wordy(ch):
        return "inside a word"
    if before.isspace() != ch.isspace():
        return "at a space/word boundary"
    return "mid-text"


_COARSE = {"a newline": "a line break", "a carriage return": "a line break", "a space": "whitespace",
           "a tab": "whitespace", "other whitespace": "whitespace"}  # fmt: skip


def coarse_class(ch: str | None) -> str:
    """The grouping part of a character's class: whitespace, line break, digit, letter, …
    (ASCII or not is shown, not grouped on)."""
    name = char_class(ch)
    return _COARSE.get(name, name.replace("an ASCII", "a").replace("a non-ASCII", "a"))


def _edit(reference: Sequence[object], engine: Sequence[object], i: int) -> tuple[str, object] | None:
    """``("an extra", token)`` when the engine inserts one token at ``i`` and then agrees
    (a BOS added), ``("a missing", token)`` when it leaves one out; else None."""
    if i < len(engine) and list(engine[i + 1 : i + 4]) == list(reference[i : i + 3]):
        return "an extra", engine[i]
    if i < len(reference) and list(reference[i + 1 : i + 4]) == list(engine[i : i + 3]):
        return "a missing", reference[i]
    return None


def site(
    stage: str,
    text: str,
    reference: Sequence[object] | None,
    engine: Sequence[object] | None,
    pieces: Callable[[int], bytes] | None,
    at: int | None = None,
) -> tuple[str, str]:
    """Where the first divergence falls in ``text`` (the input for split and encode,
    the reference's text for decode and render): for split and encode from the first
    differing piece or token of ``reference`` and ``engine``; else at offset ``at``.
    Two descriptions: the grouping key (the kind of token for split and encode; the
    coarse class of the character and start/end/elsewhere for texts) and the whole
    site shown (the token, the character's class, the kind of position)."""
    token: str | None = ""
    if reference is not None and engine is not None:
        i = first_difference(list(reference), list(engine))
        i = 0 if i is None else i
        edit = _edit(reference, engine, i)
        if stage == "split":
            at = sum(len(str(p)) for p in reference[:i])
            token = str(reference[i]) if i < len(reference) else None
            if edit:
                kind = f"{edit[0]} token: {token_kind(str(edit[1]))}"
                return kind, f"{kind} · {position_kind(text, at)}"
        elif pieces is not None:
            raw = b"".join(pieces(int(t)) for t in reference[:i])  # type: ignore[call-overload]
            at = len(text.encode("utf-8")[: len(raw)].decode("utf-8", "ignore"))
            token = pieces(int(reference[i])).decode("utf-8", "replace") if i < len(reference) else None  # type: ignore[call-overload]
            if edit:
                kind = f"{edit[0]} token: {token_kind(pieces(int(edit[1])).decode('utf-8', 'replace'))}"  # type: ignore[call-overload]
                return kind, f"{kind} · {position_kind(text, at)}"
        else:
            where = f"token {'past the end' if i >= len(reference) else 'mid-sequence'}"
            return where, where
    at = 0 if at is None else at
    ch = text[at] if at < len(text) else None
    shown = " · ".join(
        [
            *([f"in {token_kind(token)}"] if token != "" else []),
            f"on {char_class(ch)}",
            position_kind(text, at),
        ]
    )
    if token != "":
        return f"in {token_kind(token)}", shown
    place = "at the start" if at <= 0 else "at the end" if at >= len(text) else "mid-text"
    return f"on {coarse_class(ch)} {place}", shown
