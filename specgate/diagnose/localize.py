"""Where inside the tokenizer an engine departs, from its answer alone.

The diagnosis catalogue (``specgate.diagnose.tokenizer``) names a cause only when a
planted deviation reproduces the engine exactly; most engines have bugs nobody
planted. This localizes any failing ``encode`` or ``split`` case to the step of the
GGUF pipeline (``oracle.tokenizer``: special-token scan, pre-tokenizer, byte map, BPE
merges) whose output the engine's answer cannot come from, by replaying each step of
the oracle and comparing the engine's token boundaries with it:

* **normalization**: the engine's answer is the pipeline's on the NFC (or NFKC) form
  of the text;
* **the special-token scan**: a control token's text became its one id in plain mode,
  or was cut out as its own segment (its text tokenized alone) in plain mode, or a
  special the reference matches is not matched;
* **the byte map**: the engine's tokens spell other bytes than the text;
* **the pre-tokenizer**: an engine token crosses a reference piece boundary (two pieces
  merged), or the engine's tokens of one piece are that piece cut in two and merged
  separately — named by the regex branch of each piece and the character classes at
  the cut (``a space attached to a letter-number \\p{Nl}``, ``a contraction matched
  case-insensitively``);
* **the BPE merges**: same pieces, other merges — the first merge of the reference's
  replay (its rank and pair) whose result the engine's tokens cut.

``localize_encode`` and ``localize_split`` give one line; ``localize_group`` puts a
group's first case to the engine again and gives its line: every split, encode and
render failure group gets it (``specgate.run.triage``), named by the catalogue or not
(a render case is localized to its template construct by
``specgate.diagnose.render_localize``).
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from collections.abc import Sequence
from typing import Any

from oracle import pretokenize
from oracle.byte_level import from_standin, to_standin
from oracle.tokenizer import Tokenizer
from specgate.diagnose.render_localize import cause_of as render_cause
from specgate.diagnose.render_localize import localize_render_group

#: Each pre-tokenizer arm as the pattern writes it (``oracle.pretokenize``).
BRANCHES = {
    "contraction": "the contraction branch (?i:'s|'t|'re|'ve|'m|'ll|'d)",
    "word": "the word branch [^\\r\\n\\p{L}\\p{N}]?\\p{L}+",
    "digit": "the number branch \\p{N}",
    "punctuation": "the punctuation branch ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*",
    "line_breaks": "the line-break branch \\s*[\\r\\n]+",
    "trailing_space": "the whitespace branch \\s+(?!\\S)",
    "whitespace": "the whitespace branch \\s+",
}
_CATEGORY_NAMES = {
    "Lu": "an uppercase letter", "Ll": "a lowercase letter", "Lt": "a titlecase letter",
    "Lm": "a modifier letter", "Lo": "a letter", "Mn": "a combining mark", "Mc": "a spacing mark",
    "Me": "an enclosing mark", "Nd": "a digit", "Nl": "a letter-number", "No": "a number",
    "Zs": "a space", "Cc": "a control character", "Po": "a punctuation mark", "Ps": "an opening bracket",
    "Pe": "a closing bracket", "Pd": "a dash", "Sm": "a math symbol", "Sc": "a currency symbol",
    "So": "a symbol", "Sk": "a modifier symbol", "Cf": "a format character",
}  # fmt: skip


def char_class(ch: str) -> str:
    """``a letter-number \\p{Nl}``: what a character is, by its Unicode category."""
    if ch == " ":
        return "a space"
    if ch in "\r\n":
        return "a line break"
    cat = unicodedata.category(ch)
    space = " (whitespace)" if ch.isspace() and cat == "Cc" else ""  # a tab, a form feed
    return f"{_CATEGORY_NAMES.get(cat, 'a character')} \\p{{{cat}}}{space}"


def pieces_with_branches(text: str, rule: pretokenize.Rule) -> list[tuple[str, str]]:
    """The reference pieces of ``text`` and the branch (arm name) that matched each:
    the scan of ``oracle.pretokenize.split``, keeping which alternative won."""
    cls = text.translate(rule.classes)
    out, i = [], 0
    while i < len(text):
        for arm in pretokenize.ARMS:
            if cls[i] in arm.starts_on and (end := arm(text, cls, i)) is not None:
                break
        else:  # pragma: no cover — every class starts some arm
            raise AssertionError(f"no arm matches at {i}")
        out.append((text[i:end], arm.__name__))
        i = end
    return out


def _bounds(lengths: Sequence[int]) -> set[int]:
    return set(itertools.accumulate(lengths))


def _piece_bytes(tok: Tokenizer, token: int) -> bytes:
    return from_standin(tok.tokens[token]) if 0 <= token < len(tok.tokens) else b""


def _show(text: str | bytes) -> str:
    if isinstance(text, bytes):
        text = text.decode("utf-8", "backslashreplace")
    return repr(text)[:60]


def localize_encode(tok: Tokenizer, text: str, parse_special: bool, got: Sequence[int]) -> str:
    """One line: the step of the encode pipeline the engine's ids ``got`` depart at."""
    got = list(got)
    expected = tok.encode(text, parse_special)
    if got == expected:
        return "not localized: the engine's ids are the reference pipeline's"
    for form in ("NFC", "NFKC"):
        normal = unicodedata.normalize(form, text)
        if normal != text and tok.encode(normal, parse_special) == got:
            return (f"normalization: the engine's ids are the reference pipeline's for the {form} form of "
                    f"the text (the GGUF pipeline normalizes nothing)")  # fmt: skip
    control = {i: t for t, i in tok.parsed.ids.items() if t not in tok.always.ids}
    if not parse_special:
        found = next((control[i] for i in got if i in control), None)
        if found is not None:
            return (f"special-token scan: the control token's text {_show(found)} became its one id in plain "
                    f"mode (parse_special false: control tokens are plain text)")  # fmt: skip
    scanner = tok.parsed if parse_special else tok.always
    data = text.encode("utf-8")
    got_bytes = [_piece_bytes(tok, i) for i in got]
    if b"".join(got_bytes) != data:
        spelled = b"".join(got_bytes)
        at = next(
            (k for k, (a, b) in enumerate(zip(data, spelled, strict=False)) if a != b),
            min(len(data), len(spelled)),
        )
        return (f"byte map: the engine's tokens spell other bytes than the text from byte {at} "
                f"(text {_show(data[at:at + 8])}, the engine's {_show(spelled[at:at + 8])})")  # fmt: skip
    engine = _bounds([len(b) for b in got_bytes])
    expected_bounds = _bounds([len(_piece_bytes(tok, i)) for i in expected])
    # the reference's segments and pieces, with their byte spans
    pieces: list[tuple[int, int, str, str]] = []  # start, end, text, branch ("" for a special)
    pos = 0
    for segment, special in scanner.segments(text):
        if special is not None:
            n = len(segment.encode("utf-8"))
            if (pos not in engine and pos != 0) or pos + n not in engine or special not in got:
                return (f"special-token scan: the special {_show(segment)} the reference matches as its one "
                        f"id {special} is not matched by the engine (its text tokenized as plain text)")  # fmt: skip
            pieces.append((pos, pos + n, segment, ""))
            pos += n
            continue
        for piece, branch in pieces_with_branches(segment, tok.rule):
            n = len(piece.encode("utf-8"))
            pieces.append((pos, pos + n, piece, branch))
            pos += n
    if not parse_special:  # a control token's text cut out as its own segment in plain mode
        for ctext in control.values():
            start = text.find(ctext)
            while start != -1:
                b0 = len(text[:start].encode("utf-8"))
                b1 = b0 + len(ctext.encode("utf-8"))
                cut = (b0 in engine or b0 == 0) and b1 in engine
                inside = [p for p in pieces if p[0] < b1 and p[1] > b0]
                ref_cut = (b0 == 0 or b0 in expected_bounds) and b1 in expected_bounds
                if cut and not ref_cut and inside:
                    return (f"special-token scan: the control token's text {_show(ctext)} was cut out as its "
                            f"own segment in plain mode (the reference tokenizes it as plain text with what "
                            f"surrounds it)")  # fmt: skip
                start = text.find(ctext, start + 1)
    reference = {p[1] for p in pieces}
    for left, right in itertools.pairwise(pieces):
        boundary = left[1]
        if boundary not in engine:  # an engine token crosses it: the engine merged two pieces
            return "pre-tokenizer: " + _crossing(text, left, right, data)
    for start, end, piece, branch in pieces:
        inner = sorted(b for b in engine if start < b < end)
        ids = [
            i
            for i, b in zip(got, itertools.accumulate(len(x) for x in got_bytes), strict=True)
            if start < b <= end
        ]
        if ids == tok.encode_piece(piece) if branch else ids == [tok.parsed.ids.get(piece)]:
            continue
        for cut in inner:  # the piece cut in two, each half merged on its own
            head = data[start:cut].decode("utf-8", "replace")
            tail = data[cut:end].decode("utf-8", "replace")
            if _classes_differ(tok, head[-1:], tail[:1]) and ids == tok.encode_piece(head) + tok.encode_piece(
                tail
            ):
                return (f"pre-tokenizer: the engine cuts the reference piece {_show(piece)} ({BRANCHES[branch]}) "
                        f"between {_show(head)} and {_show(tail)}: between {_describe(head[-1:], tail[:1])}")  # fmt: skip
        return "BPE merges: " + _first_merge(tok, piece, start, engine, reference)
    return "not localized: every step of the pipeline agrees with the engine's ids on this case"


def _classes_differ(tok: Tokenizer, a: str, b: str) -> bool:
    """Whether a pre-tokenizer could cut between ``a`` and ``b``: their classes differ
    (the rule's, or their Unicode categories); a cut between two letters of one kind is
    the merges', not a pre-tokenizer's."""
    if not a or not b:
        return False
    return a.translate(tok.rule.classes) != b.translate(tok.rule.classes) or (
        unicodedata.category(a) != unicodedata.category(b)
    )


def _describe(a: str, b: str) -> str:
    return f"{char_class(a)} and {char_class(b)}" if a and b else "its ends"


def _crossing(text: str, left: tuple, right: tuple, data: bytes) -> str:
    """The line for an engine token across the reference boundary between two pieces."""
    lt, lb, rt, rb = left[2], left[3], right[2], right[3]
    where = f"the reference pieces {_show(lt)} ({BRANCHES.get(lb, 'a special')}) and {_show(rt)} ({BRANCHES.get(rb, 'a special')})"
    if lb == "contraction" and lt[1:] != lt[1:].lower():
        why = f"a contraction matched case-insensitively ({_show(lt)}): the engine does not cut it off"
    elif lt[-1:].isspace() and not rt[:1].isspace():
        why = f"{char_class(lt[-1])} attached to {char_class(rt[0])}"
    else:
        why = f"{char_class(lt[-1:] or ' ')} and {char_class(rt[:1] or ' ')} joined"
    return f"an engine token crosses the boundary between {where}: {why}"


def _first_merge(tok: Tokenizer, piece: str, start: int, engine: set[int], reference: set[int]) -> str:
    """The first merge of the reference's replay on ``piece`` whose result spans an
    engine token boundary (so the engine did not apply it there)."""
    parts = list(to_standin(piece.encode("utf-8")))
    widths = [1] * len(parts)  # bytes per symbol (a stand-in character is one byte)
    while True:
        ranked = [(tok.ranks[p], i) for i, p in enumerate(itertools.pairwise(parts)) if p in tok.ranks]
        if not ranked:
            break
        rank, i = min(ranked)
        cut = start + sum(widths[: i + 1])  # the byte offset between the two symbols
        if cut in engine:
            a, b = from_standin(parts[i]), from_standin(parts[i + 1])
            return (f"the same pieces, other merges: the reference applies merge rank {rank} "
                    f"({_show(a)} + {_show(b)}) in {_show(piece)}; the engine's tokens cut there")  # fmt: skip
        parts[i : i + 2] = [parts[i] + parts[i + 1]]
        widths[i : i + 2] = [widths[i] + widths[i + 1]]
    return (f"the same pieces, other merges in {_show(piece)}: the engine merges across a cut the "
            f"reference's merges leave (a merge the merge list does not rank first there)")  # fmt: skip


def localize_split(tok: Tokenizer, text: str, got: Sequence[str]) -> str:
    """One line: where the engine's pre-tokenizer pieces depart from the reference's."""
    for form in ("NFC", "NFKC"):
        normal = unicodedata.normalize(form, text)
        if normal != text and tok.split(normal) == list(got):
            return f"normalization: the engine's pieces are the reference's for the {form} form of the text"
    if "".join(got) != text:
        return "pre-tokenizer: the engine's pieces do not concatenate to the text"
    pieces = pieces_with_branches(text, tok.rule)
    engine = _bounds([len(p) for p in got])
    data = text
    ends = list(itertools.accumulate(len(p) for p, _ in pieces))
    for k, (left, right) in enumerate(itertools.pairwise(pieces)):
        if ends[k] not in engine:
            lt = (0, 0, left[0], left[1])
            rt = (0, 0, right[0], right[1])
            return "pre-tokenizer: " + _crossing(data, lt, rt, b"").replace(
                "an engine token", "an engine piece"
            )
    start = 0
    for (piece, branch), end in zip(pieces, ends, strict=True):
        inner = sorted(b for b in engine if start < b < end)
        if inner:
            head, tail = text[start : inner[0]], text[inner[0] : end]
            return (f"pre-tokenizer: the engine cuts the reference piece {_show(piece)} ({BRANCHES[branch]}) "
                    f"between {_show(head)} and {_show(tail)}: between {_describe(head[-1:], tail[:1])}")  # fmt: skip
        start = end
    return "not localized: the engine's pieces are the reference's"


def localize_group(
    engine: Any, record: Any, inp: dict[str, Any], model: Any, tokenizers: dict[str, Any]
) -> str:
    """The localized line of a failing split, encode or render case (``record``, its input
    ``inp``): the engine asked again, its answer localized against the model's oracle
    tokenizer or chat template (``specgate.diagnose.render_localize``; ``tokenizers``
    caches them by model id)."""
    from specgate.diagnose.tokenizer import ask

    if record.stage == "render":
        return localize_render_group(engine, inp, model, tokenizers)
    if record.model not in tokenizers:
        tokenizers[record.model] = Tokenizer.from_gguf(model.gguf)
    tok = tokenizers[record.model]
    got = ask(engine, record.stage, model, inp)
    if record.stage == "split":
        return localize_split(tok, inp["text"], got)
    return localize_encode(tok, inp["text"], inp["parse_special"], got)


_QUOTE = r"""[bB]?'(?:[^'\\]|\\.)*'|[bB]?"(?:[^"\\]|\\.)*\""""
_LETTER = re.compile(r"an? (?:uppercase |lowercase |titlecase |modifier )?letter \\p\{L[ultmo]\}")
_WHITESPACE = re.compile(r"a space|a line break|a control character \\p\{Cc\} \(whitespace\)")
_LOCALIZED_CAUSES = (  # (pattern over the line, the cause it names): one per line ``localize`` writes
    (r"normalization: .* for the (NFK?C) form", "normalization: the engine normalizes the text to {0}"),
    (r"special-token scan: .* became its one id in plain mode",
     "special-token scan: a control token's text becomes its one id in plain mode"),
    (r"special-token scan: .* cut out as its own segment in plain mode",
     "special-token scan: a control token's text is cut out as its own segment in plain mode"),
    (r"special-token scan: the special .* is not matched",
     "special-token scan: a special token the reference matches is not matched"),
    (r"byte map: ", "byte map: the engine's tokens spell other bytes than the text"),
    (r"pre-tokenizer: .*: a contraction matched case-insensitively",
     "pre-tokenizer: a contraction matched case-insensitively is not cut off"),
    (r"pre-tokenizer: an engine (?:token|piece) crosses the boundary between .*\): (.*)",
     "pre-tokenizer: {0}"),
    (rf"pre-tokenizer: the engine cuts the reference piece (?:{_QUOTE}) \(.*\) between (?:{_QUOTE}) and "
     rf"(?:{_QUOTE}): between (.*)", "pre-tokenizer: a reference piece cut between {0}"),
    (r"pre-tokenizer: the engine's pieces do not concatenate",
     "pre-tokenizer: the engine's pieces do not concatenate to the text"),
    (r"BPE merges: ", "BPE merges: the same pieces, other merges"),
)  # fmt: skip


def cause_of(line: str) -> str:
    """The cause a localized line names, without the case's own text (its pieces, offsets
    and merge ranks; a letter of any case is ``a letter``, a space, tab or line break
    ``whitespace``; a render line's template construct, ``render_localize.cause_of``): what
    groups of one cause share (``specgate.run.triage.merge_by_cause``). Empty for a line that
    localizes nothing."""
    if line.startswith("render: "):
        return render_cause(line)
    for pattern, cause in _LOCALIZED_CAUSES:
        if m := re.match(pattern, line, re.S):
            return _WHITESPACE.sub("whitespace", _LETTER.sub(r"a letter \\p{L}", cause.format(*m.groups())))
    return ""


#: What a cause's ``{0}`` can be, by its template (``_LOCALIZED_CAUSES``): a character class
#: as ``char_class`` gives it and ``cause_of`` folds it (letters and whitespace of any kind as one).
_CLASS = r"(?:whitespace|an? [a-z][a-z -]* \\p\{[A-Z][a-z]?\})"
_FILLS = {
    "normalization: the engine normalizes the text to {0}": r"NFK?C",
    "pre-tokenizer: {0}": rf"{_CLASS} attached to {_CLASS}|{_CLASS} and {_CLASS} joined",
    "pre-tokenizer: a reference piece cut between {0}": rf"{_CLASS} and {_CLASS}|its ends",
}


def causes() -> list[str]:
    """The causes ``cause_of`` gives, as templates (``{0}``: the characters' classes, or the
    normalization form): what ``is_cause`` accepts."""
    return [cause for _, cause in _LOCALIZED_CAUSES]


def is_cause(text: str) -> bool:
    """Whether ``text`` is a cause ``cause_of`` can give (a report's heading of a localized
    group, its JSON ``cause``): ``specgate search --given-cause`` takes nothing else."""
    for cause in causes():
        if "{0}" not in cause:
            if text == cause:
                return True
            continue
        head, tail = cause.split("{0}")
        middle = text[len(head) : len(text) - len(tail)]
        if (
            len(text) > len(head) + len(tail)
            and text.startswith(head)
            and text.endswith(tail)
            and re.fullmatch(_FILLS[cause], middle)
        ):
            return True
    return False
