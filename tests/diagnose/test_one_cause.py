"""One group per cause (issue 35): failure groups that share a localized cause or a
diagnosis merge — across stages, conformance classes, models and divergence sites —,
headed by the cause, listing where it shows; two causes stay two groups.

The localized lines are the real ones: planted engines' answers (written here from the
oracle's parts) localized by ``specgate.diagnose.localize`` on the qwen3 vocabulary."""

from __future__ import annotations

import unicodedata
from types import SimpleNamespace

import pytest

from oracle import pretokenize
from oracle.tokenizer import Tokenizer
from specgate.diagnose.localize import cause_of, localize_encode, localize_split
from specgate.outcomes.verdict import GateRecord
from specgate.plugin import model_missing
from specgate.reports import browser
from specgate.run import triage
from specgate.supply import models as model_cache

MODEL = "qwen3-vocab"


def digits_in_pairs(text: str, cls: str, i: int) -> int | None:
    """The planted pre-tokenizer arm: digits taken two at a time (the reference: one)."""
    if cls[i] != "N":
        return None
    end = i
    while end < len(cls) and end - i < 2 and cls[end] == "N":
        end += 1
    return end


digits_in_pairs.starts_on = "N"  # type: ignore[attr-defined]
DIGIT_ARMS = tuple(digits_in_pairs if a is pretokenize.digit else a for a in pretokenize.ARMS)
LOOKAHEAD_ARMS = tuple(a for a in pretokenize.ARMS if a is not pretokenize.trailing_space)


def planted(tok: Tokenizer, stage: str, text: str, arms=pretokenize.ARMS, nfc: bool = False) -> str:
    """The localized line of a planted engine's answer on ``text``."""
    if nfc:
        text_seen = unicodedata.normalize("NFC", text)
        got = tok.split(text_seen) if stage == "split" else tok.encode(text_seen, False)
    else:
        pieces = pretokenize.split(text, tok.rule, arms)
        got = pieces if stage == "split" else [i for p in pieces for i in tok.encode_piece(p)]
    if stage == "split":
        return localize_split(tok, text, got)
    return localize_encode(tok, text, False, got)


def group_of(
    tok: Tokenizer, stage: str, model: str, text: str, site: str, n: int, message: str, **plant
) -> list[GateRecord]:
    """``n`` failing records of one (stage, model) whose first divergence falls at ``site``."""
    return [
        GateRecord(stage, model, "fail", f"{stage}[{model}/{site}/{i}]", message, case=f"{site}{i}",
                   answers={"site": site, "text": text, **{k: str(v) for k, v in plant.items()}})
        for i in range(n)
    ]  # fmt: skip


def localized_groups(
    tok: Tokenizer, records: list[GateRecord], plants: dict[str, dict]
) -> list[triage.Group]:
    """``group_records``, then each group localized on its first case as ``triage.localize_groups`` does."""
    groups = triage.group_records(records)
    for g in groups:
        first = g.records[0]
        g.localized = planted(tok, first.stage, first.answers["text"], **plants[first.answers["plant"]])
    return groups


def lookahead_rows(tok: Tokenizer) -> list[GateRecord]:
    """A whitespace run before a word taken whole (no ``\\s+(?!\\S)`` arm) as the gate sees
    it: split and encode, two models, three divergence sites."""
    return [
        *group_of(tok, "split", "qwen3-vocab", "a   b", "in a whitespace run", 5, "pieces differ",
                  plant="lookahead"),
        *group_of(tok, "split", "deepseek-vocab", "if  (x)", "before punctuation", 2, "pieces differ",
                  plant="lookahead"),
        *group_of(tok, "encode", "qwen3-vocab", "x  \ty", "in a whitespace run", 4, "ids differ at N",
                  plant="lookahead"),
        *group_of(tok, "encode", "deepseek-vocab", "end.   Next", "in a whitespace run", 1,
                  "ids differ in length", plant="lookahead"),
    ]  # fmt: skip


PLANTS = {"digits": {"arms": DIGIT_ARMS}, "lookahead": {"arms": LOOKAHEAD_ARMS}, "nfc": {"nfc": True}}


def test_one_cause_in_several_rows_models_and_sites_is_one_group(tok: Tokenizer) -> None:
    groups = localized_groups(tok, lookahead_rows(tok), PLANTS)
    assert len(groups) == 4, [g.signature for g in groups]  # the signatures alone: four groups
    assert all(g.localized.startswith("pre-tokenizer:") for g in groups), [g.localized for g in groups]
    (merged,) = triage.merge_by_cause(groups, cause_of)
    shown = merged.as_dict()
    assert shown["count"] == 12 and shown["stages"] == ["encode", "split"]
    assert shown["models"] == ["deepseek-vocab", "qwen3-vocab"]
    assert sorted((s["stages"][0], s["models"][0], s["count"]) for s in shown["shows_in"]) == [
        ("encode", "deepseek-vocab", 1), ("encode", "qwen3-vocab", 4),
        ("split", "deepseek-vocab", 2), ("split", "qwen3-vocab", 5),
    ]  # fmt: skip
    heading = browser.group_heading(shown)
    assert heading == "pre-tokenizer: whitespace and whitespace joined", heading  # the cause, not a message
    assert "'" not in heading, heading  # none of one case's text
    lines = browser.shows_in(shown)
    assert len(lines) == 4 and any("encode · deepseek-vocab · 1 fail case" in line for line in lines), lines
    assert (
        merged.records[0].nodeid == "split[qwen3-vocab/in a whitespace run/0]"
    )  # the largest's case is shrunk


def test_two_causes_stay_two_groups_each_listing_its_places(tok: Tokenizer) -> None:
    records = [
        *lookahead_rows(tok),
        *group_of(tok, "split", "qwen3-vocab", "room 101", "in a number", 6, "pieces differ", plant="digits"),
        *group_of(tok, "split", "deepseek-vocab", "pi 3.14159", "in a decimal", 3, "pieces differ",
                  plant="digits"),
        *group_of(tok, "encode", "deepseek-vocab", "cafe\u0301", "on a combining mark", 7, "ids differ at N",
                  plant="nfc"),
        *group_of(tok, "split", "deepseek-vocab", "cafe\u0301 x", "on a combining mark", 2, "pieces differ",
                  plant="nfc"),
    ]  # fmt: skip
    groups = triage.merge_by_cause(localized_groups(tok, records, PLANTS), cause_of)
    by_plant = {}
    for g in groups:
        by_plant.setdefault(frozenset(r.answers["plant"] for r in g.records), []).append(len(g.records))
    assert by_plant == {
        frozenset({"lookahead"}): [12],
        frozenset({"digits"}): [9],
        frozenset({"nfc"}): [9],
    }, [(g.cause, len(g.records)) for g in groups]
    assert sorted(g.cause.split(":")[0] for g in groups) == [
        "normalization",
        "pre-tokenizer",
        "pre-tokenizer",
    ]


def test_a_group_without_a_cause_stays_as_it_is(tok: Tokenizer) -> None:
    records = [
        *group_of(
            tok, "split", "qwen3-vocab", "year 2024", "in a number", 2, "pieces differ", plant="digits"
        ),
        GateRecord("decode", "qwen3-vocab", "fail", "decode[a]", "bytes differ"),
        GateRecord("decode", "deepseek-vocab", "fail", "decode[b]", "bytes differ at offset 7"),
        GateRecord("encode", "qwen3-vocab", "error", "encode[c]", "the engine timed out"),
    ]
    groups = triage.group_records(records)
    groups[0].localized = planted(tok, "split", "room 101", arms=DIGIT_ARMS)
    groups[1].localized = "not localized (ValueError: the engine's answer was malformed)"
    merged = triage.merge_by_cause(list(groups), cause_of)
    assert [g.signature for g in merged] == [g.signature for g in groups]
    assert merged[0].cause and not merged[1].cause and not merged[2].cause
    (error,) = [g for g in merged if g.records[0].outcome == "error"]
    assert browser.group_heading(error.as_dict()) == "the engine timed out"  # its own first message


def diagnosis(stage: str, model: str, n: int, cause: str) -> SimpleNamespace:
    records = [
        GateRecord(stage, model, "fail", f"{stage}[{model}/{i}]", "max |Δlogit| N > tolerance")
        for i in range(n)
    ]
    return SimpleNamespace(
        stage=stage, cause=cause, records=records, evidence=f"{n} of {n} failing {stage} cases"
    )


def test_one_diagnosis_on_both_logits_rows_is_one_group() -> None:
    """A RoPE-pairing engine named on its logits/exact and logits/quantized rows: one group."""
    rope = "rotates interleaved RoPE pairs (GPT-J) instead of NeoX halves"
    diagnoses = [
        diagnosis("logits/exact", "tiny", 9, rope),
        diagnosis("logits/quantized", "tiny", 4, rope),
        diagnosis("logits/exact", "tiny", 2, "leaves out the attention biases"),
    ]
    groups = triage.group_records([r for d in diagnoses for r in d.records], diagnoses)
    assert len(groups) == 3  # one per stage and cause before
    merged = triage.merge_by_cause(groups, cause_of)
    assert [(g.diagnosis, len(g.records)) for g in merged] == [
        (rope, 13),
        ("leaves out the attention biases", 2),
    ]
    shown = merged[0].as_dict()
    assert shown["stages"] == ["logits/exact", "logits/quantized"]
    assert shown["evidence"] == "9 of 9 failing logits/exact cases; 4 of 4 failing logits/quantized cases"
    assert browser.group_heading(shown) == f"the engine {rope}"


def test_an_unnamed_group_joins_the_one_diagnosis_of_its_localized_cause(tok: Tokenizer) -> None:
    """NFC diagnosed on encode; its split row left undiagnosed (the budget ran out) but
    localized to NFC: one group. Two diagnoses with one localized cause stay two."""
    named = diagnosis("encode", "qwen3-vocab", 5, "normalizes the text to NFC first")
    split = group_of(
        tok, "split", "qwen3-vocab", "cafe\u0301 x", "on a combining mark", 3, "pieces differ", plant="nfc"
    )
    groups = triage.group_records([*named.records, *split], [named])
    groups[0].localized = planted(tok, "encode", "cafe\u0301", nfc=True)
    groups[1].localized = planted(tok, "split", "cafe\u0301 x", nfc=True)
    (merged,) = triage.merge_by_cause(groups, cause_of)
    assert merged.diagnosis == "normalizes the text to NFC first" and len(merged.records) == 8
    assert merged.evidence == (
        "5 of 5 failing encode cases; 3 more failing split cases of qwen3-vocab the diagnosis did not "
        "explain, localized to the same cause (normalization: the engine normalizes the text to NFC)"
    )
    other = diagnosis("split", "qwen3-vocab", 2, "normalizes the text to NFKC first")
    groups = triage.group_records([*named.records, *other.records, *split], [named, other])
    for g in groups:
        g.localized = planted(tok, g.records[0].stage, "cafe\u0301 x", nfc=True)
    assert len(triage.merge_by_cause(groups, cause_of)) == 3


def test_the_cause_of_a_line_drops_the_case_but_keeps_the_step(tok: Tokenizer) -> None:
    a = planted(tok, "split", "room 101", arms=DIGIT_ARMS)
    b = planted(tok, "split", "pi is 3.14159", arms=DIGIT_ARMS)
    assert a != b and cause_of(a) == cause_of(b) != "", (a, b)
    c, d = (planted(tok, "split", t, arms=LOOKAHEAD_ARMS) for t in ("a   b", "x  \ty"))
    assert c != d and cause_of(c) == cause_of(d) != cause_of(a), (c, d)
    assert (
        cause_of(planted(tok, "encode", "cafe\u0301", nfc=True))
        == "normalization: the engine normalizes the text to NFC"
    )
    assert (
        cause_of("not localized: every step of the pipeline agrees with the engine's ids on this case") == ""
    )


@pytest.mark.slow
def test_a_planted_engine_one_cause_on_two_stages_and_two_models_is_one_group(tmp_path) -> None:
    """``fixable_tokenizer.py --defects=nfc`` gated on split and encode of two vocabularies:
    one group (before: one per stage), headed by the cause, listing both stages; with a
    second planted cause (``lookahead``), two groups."""
    from pathlib import Path

    from tests.engines.parity_run import run_parity, script_impl

    other = "deepseek-r1-distill-qwen-7b-vocab"
    if other not in model_cache.cached_models():
        model_missing(f"{other}; run: specgate models fetch {other}")
    engine = Path(__file__).resolve().parents[1] / "engines" / "fixable_tokenizer.py"
    for defects, causes in (("nfc", 1), ("nfc,lookahead", 2)):
        run = run_parity(
            tmp_path / defects, script_impl(engine, f"--defects={defects}"), "split,encode", f"{MODEL},{other}",
            "--shrink-budget", "0", "-p", "no:xdist",
        )  # fmt: skip
        assert run.status == 1, run.output[-3000:]
        failing = [g for g in run.report["groups"] if g["outcome"] == "fail"]
        assert len(failing) == causes, [(g["signature"], g["localized"]) for g in failing]
        nfc = next(g for g in failing if "NFC" in g["diagnosis"])
        assert nfc["stages"] == ["encode", "split"] and nfc["models"] == sorted([MODEL, other]), nfc
        assert len(nfc["shows_in"]) >= 2 and nfc["count"] == sum(s["count"] for s in nfc["shows_in"])
        md = next((tmp_path / defects / "reports").glob("parity-*.md")).read_text("utf-8")
        assert md.count("**One cause, shown in:**") >= 1
