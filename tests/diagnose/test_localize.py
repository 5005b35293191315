"""Localization inside the tokenizer (issue 35): a failing encode or split case is put
down to the step of the GGUF pipeline the engine departs at — from the engine's answer
alone, with no catalogue entry for the bug. Each planted engine below is written here,
from the oracle's parts, independently of ``specgate.diagnose.localize``."""

from __future__ import annotations

import itertools
import unicodedata

import pytest

from oracle import bpe, pretokenize
from oracle.byte_level import from_standin, to_standin
from oracle.tokenizer import Tokenizer
from specgate.diagnose.localize import localize_encode, localize_split

MODEL = "qwen3-vocab"


def pieces_encoded(tok: Tokenizer, pieces: list[str]) -> list[int]:
    return [i for p in pieces for i in tok.encode_piece(p)]


def test_a_special_cut_into_its_own_segment_in_plain_mode(tok: Tokenizer) -> None:
    text = "hi!<|im_end|>!"  # the reference: "!<|" and "|>!" are punctuation runs
    engine = pieces_encoded(tok, [p for seg in ("hi!", "<|im_end|>", "!") for p in tok.split(seg)])
    assert engine != tok.encode(text, False)
    line = localize_encode(tok, text, False, engine)
    assert line.startswith("special-token scan:") and "cut out as its own segment" in line, line


def test_a_special_becoming_its_id_in_plain_mode(tok: Tokenizer) -> None:
    text = "x<|im_end|>"
    engine = tok.encode(text, True)  # parses specials whatever it is asked
    line = localize_encode(tok, text, False, engine)
    assert line.startswith("special-token scan:") and "became its one id in plain mode" in line, line


def test_a_special_not_matched(tok: Tokenizer) -> None:
    text = "<|im_start|>user"
    engine = tok.encode(text, False)  # never parses specials
    line = localize_encode(tok, text, True, engine)
    assert line.startswith("special-token scan:") and "is not matched" in line and "<|im_start|>" in line, (
        line
    )


def _spaced_letter_number(tok: Tokenizer) -> str | None:
    """A letter-number (\\p{Nl}) whose space-led form is one token of the vocabulary."""
    for token in tok.tokens:
        text = from_standin(token).decode("utf-8", "replace")
        if len(text) == 2 and text[0] == " " and unicodedata.category(text[1]) == "Nl":
            return text[1]
    return None


class NlAsLetters(pretokenize.CharClasses):
    """The planted pre-tokenizer: a letter-number (\\p{Nl}) counted as a letter."""

    def __missing__(self, codepoint: int) -> str:
        if unicodedata.category(chr(codepoint)) == "Nl":
            self[codepoint] = "L"
            return "L"
        return super().__missing__(codepoint)


def test_a_space_attached_to_a_letter_number(tok: Tokenizer) -> None:
    """Split shows it on any vocabulary; encode only where a space and the letter-number
    merge into one token (qwen3-vocab has none such: its ids are the same, nothing to say)."""
    rule = pretokenize.Rule("planted", NlAsLetters(marks_are_letters=False))
    text = "chapter \u216b begins"  # Ⅻ, ROMAN NUMERAL TWELVE: \p{Nl}
    pieces = pretokenize.split(text, rule)
    assert pieces != tok.split(text)
    line = localize_split(tok, text, pieces)
    assert line.startswith("pre-tokenizer:") and "a space attached to a letter-number \\p{Nl}" in line, line
    assert "the number branch \\p{N}" in line, line
    nl = _spaced_letter_number(tok)
    if nl is not None:
        text = f"chapter {nl} begins"
        engine = pieces_encoded(tok, pretokenize.split(text, rule))
        line = localize_encode(tok, text, False, engine)
        assert line.startswith("pre-tokenizer:") and "a space attached to a letter-number" in line, line


def case_sensitive_contraction(text: str, cls: str, i: int) -> int | None:
    if text[i] != "'":
        return None
    for suffix in pretokenize.CONTRACTIONS:
        if text.startswith(suffix, i + 1):
            return i + 1 + len(suffix)
    return None


case_sensitive_contraction.starts_on = "P"  # type: ignore[attr-defined]


def test_a_contraction_matched_case_sensitively(tok: Tokenizer) -> None:
    text = "it'Some"  # the reference: "'S" (a contraction, case-insensitively) and "ome"
    arms = [case_sensitive_contraction if a is pretokenize.contraction else a for a in pretokenize.ARMS]
    pieces = pretokenize.split(text, tok.rule, arms)
    assert pieces != tok.split(text)
    line = localize_encode(tok, text, False, pieces_encoded(tok, pieces))
    assert line.startswith("pre-tokenizer:") and "a contraction matched case-insensitively" in line, line
    assert "the contraction branch" in line, line
    line = localize_split(tok, text, pieces)
    assert "a contraction matched case-insensitively" in line, line


def test_a_merge_rank_swapped(tok: Tokenizer) -> None:
    text = " hello"
    symbols = list(to_standin(text.encode("utf-8")))
    ranked = [(tok.ranks[p], p) for p in itertools.pairwise(symbols) if p in tok.ranks]
    first_rank, first = min(ranked)  # the first merge the reference applies
    last = max(tok.ranks, key=tok.ranks.get)
    ranks = {**tok.ranks, first: tok.ranks[last], last: first_rank}  # swapped with the last-ranked merge
    engine = bpe.to_ids(bpe.merge(symbols, ranks), tok.vocab)
    assert engine != tok.encode(text, False)
    line = localize_encode(tok, text, False, engine)
    assert line.startswith("BPE merges:") and f"merge rank {first_rank} " in line, line


def test_nfc(tok: Tokenizer) -> None:
    text = "cafe\u0301 au lait"
    engine = tok.encode(unicodedata.normalize("NFC", text), False)
    line = localize_encode(tok, text, False, engine)
    assert line.startswith("normalization:") and "NFC form" in line, line
    assert localize_split(tok, text, tok.split(unicodedata.normalize("NFC", text))).startswith(
        "normalization:"
    )


def test_the_reference_itself_is_not_localized(tok: Tokenizer) -> None:
    text = "WE'LL meet at \u216b, cafe\u0301<|im_end|>"
    assert localize_encode(tok, text, False, tok.encode(text, False)).startswith("not localized")
    assert localize_split(tok, text, tok.split(text)).startswith("not localized")


@pytest.mark.slow
def test_every_tokenizer_group_of_a_run_gets_its_localized_line(tmp_path, tok: Tokenizer) -> None:
    """A planted engine (``fixable_tokenizer.py``: NFC, digits in pairs — a look-alike the
    catalogue does not name —, control tokens parsed in plain mode) gated on split and
    encode: every failing group, named or not, says the step it departs at, in the JSON,
    Markdown and HTML reports."""
    from tests.engines.parity_run import planted_run

    run = planted_run(
        tmp_path, "fixable_tokenizer.py", "nfc,digits2,specials_in_plain", "split,encode", MODEL
    )
    assert run.status == 1, run.output[-3000:]
    failing = [g for g in run.report["groups"] if g["outcome"] == "fail"]
    steps = {g["localized"].split(":")[0] for g in failing}
    assert all(g["localized"] and not g["localized"].startswith("not localized") for g in failing), failing
    assert {"normalization", "pre-tokenizer", "special-token scan"} <= steps, [
        g["localized"] for g in failing
    ]
    unnamed = [g for g in failing if not g["diagnosis"]]
    assert unnamed and all(g["localized"].startswith("pre-tokenizer:") for g in unnamed), unnamed
    assert any("\\p{Nd}" in g["localized"] for g in unnamed), "the digits' class is named"
    md = next((tmp_path / "reports").glob("parity-*.md")).read_text("utf-8")
    html = next((tmp_path / "reports").glob("parity-*.html")).read_text("utf-8")
    assert md.count("**Localized:**") == len(failing) and html.count("<b>Localized:</b>") == len(failing)
