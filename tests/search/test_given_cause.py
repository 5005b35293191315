"""The search that finds the second bug when the first is only *localized* (issue 35):
``specgate search --given-cause CAUSE`` takes a cause a parity report heads a group with
(``specgate.diagnose.localize``: no catalogue entry) as given by excluding its cases — each
split or encode divergence is localized from the engine's answer in hand, and one of a
given cause is counted as explained, never a finding nor one of a signature's capped
variants (``specgate.search.given.GivenCauses``).

The planted pair: ``tests/engines/fixable_tokenizer.py --defects=astral_fffd,control_text_cut``
reads every astral-plane character as U+FFFD (frequent: emoji, math letters, private use —
about every other generated text; no catalogue entry, localized as "byte map: the engine's
tokens spell other bytes than the text") and, in plain mode, cuts a control token's text out
as its own segment (rare: a control token in plain mode with a punctuation mark, a space or
a line break beside it). Both give the one encode signature "ids differ", whose variants
the search caps: without the given cause only the frequent bug's divergences are reported;
given it, the rare one is, and the report counts what the cause explained."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from impl.registry import resolve
from oracle.tokenizer import Tokenizer
from specgate.diagnose.localize import cause_of, is_cause, localize_encode, localize_split
from specgate.run import triage
from specgate.search import reference_confirm as confirm
from specgate.search import report
from specgate.search.given import GivenCauses, UnknownGiven, from_report, given_cause
from specgate.search.search_session import SearchError, SearchResult, run_search
from specgate.stages.base import Verdict
from specgate.supply import models as model_cache
from tests.search.test_search import BUDGET, Ticks, require

ENGINE = Path(__file__).resolve().parents[1] / "engines" / "fixable_tokenizer.py"
FREQUENT = "byte map: the engine's tokens spell other bytes than the text"
RARE = "special-token scan: a control token's text is cut out as its own segment in plain mode"
NL_CUT = "pre-tokenizer: a reference piece cut between a letter \\p{L} and a letter-number \\p{Nl}"
NL_SPACE = "pre-tokenizer: whitespace attached to a letter-number \\p{Nl}"


def planted(defects: str) -> str:
    return f"cmd:{sys.executable} {ENGINE} --defects={defects}"


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    require("qwen3-vocab")
    return Tokenizer.from_gguf(model_cache.model_ref("qwen3-vocab").gguf)


def cut_control(tok: Tokenizer, text: str) -> list[int]:
    """The rare bug's answer, written here: each ``<|im_end|>`` tokenized alone."""
    head, sep, tail = text.partition("<|im_end|>")
    return [i for part in (head, sep, tail) if part for i in tok.encode(part, False)]


def test_a_cause_is_one_a_report_heads_its_group_with(tok: Tokenizer) -> None:
    """``--given-cause`` takes a cause as a report heads a localized group (or its JSON
    ``cause``), or a whole ``Localized:`` line (its cause); nothing else."""
    line = localize_encode(tok, "hi!<|im_end|>!", False, cut_control(tok, "hi!<|im_end|>!"))
    byte_line = localize_encode(tok, "a\U0001f642", False, tok.encode("a\ufffd", False))
    split_line = localize_split(tok, "x \u216b", ["x", " \u216b"])  # a space glued to Ⅻ
    assert [cause_of(x) for x in (line, byte_line, split_line)] == [RARE, FREQUENT, NL_SPACE]
    for cause in (RARE, FREQUENT, NL_CUT, NL_SPACE, "normalization: the engine normalizes the text to NFKC",
                  "pre-tokenizer: a reference piece cut between whitespace and a letter \\p{L}",
                  "BPE merges: the same pieces, other merges"):  # fmt: skip
        assert is_cause(cause) and given_cause(cause) == cause, cause
    assert given_cause(line) == RARE and given_cause(f"  {byte_line}\n") == FREQUENT
    for wrong in ("", "   ", "nfc", "the engine normalizes the text to NFC first", "pre-tokenizer: banana",
                  "pre-tokenizer: a reference piece cut between a letter \\p{L}", RARE.removesuffix(" in plain mode")):  # fmt: skip
        assert not is_cause(wrong), wrong
        with pytest.raises(UnknownGiven, match=r"^--given-cause .*: not a localized cause; .*group heading"):
            given_cause(wrong)
    with pytest.raises(SearchError, match="not a localized cause"):
        run_search(
            resolve("oracle"), "oracle", stages=["encode"], budget=1, given_causes=["x"], clock=Ticks()
        )


def test_a_divergence_is_explained_from_the_answer_in_hand(tok: Tokenizer) -> None:
    """No engine here: the verdict's answer is all ``explains`` reads. A divergence of a
    given cause is explained by it; one of another cause, a passing or erroring case, a
    stage the localization does not cover, or a malformed answer is not."""
    model = model_cache.model_ref("qwen3-vocab")
    causes = GivenCauses([RARE, NL_SPACE])
    cut = {"text": "hi!<|im_end|>!", "parse_special": False}
    astral = {"text": "a\U0001f642", "parse_special": False}
    fail = lambda inp, got: Verdict("fail", "ids differ", got, tok.encode(inp["text"], False))  # noqa: E731
    assert causes.explains("encode", model, cut, fail(cut, cut_control(tok, cut["text"]))) == RARE
    assert causes.explains("encode", model, astral, fail(astral, tok.encode("a\ufffd", False))) == ""
    assert GivenCauses([FREQUENT]).explains(
        "encode", model, astral, fail(astral, tok.encode("a\ufffd", False))
    )
    nl = {"text": "x \u216b"}
    assert causes.explains("split", model, nl, Verdict("fail", "", ["x", " \u216b"])) == NL_SPACE
    assert causes.explains("split", model, nl, Verdict("fail", "", ["x ", "\u216b"])) == ""  # another cut
    answer = cut_control(tok, cut["text"])
    for stage, verdict in (
        ("encode", Verdict("error", "the engine failed", answer)),
        ("encode", Verdict("pass", "", answer)),
        ("decode", Verdict("fail", "", answer)),
        ("encode", Verdict("fail", "", "not ids")),
        ("encode", Verdict("fail", "", [10**9])),
    ):
        assert causes.explains(stage, model, cut, verdict) == "", (stage, verdict)


def test_an_unknown_cause_is_one_usage_line(tmp_path: Path) -> None:
    """One line (saying where causes are found), before any engine starts: exit 2 for a
    cause that is none (a usage error, as an unknown ``--given`` name), 4 for a report that
    cannot be read (a bad file, as ``--save-to corpus --from``)."""
    for args, says, status in (
        (
            ["--given-cause", ""],
            "not a localized cause; a localized cause is a parity report's group heading",
            2,
        ),
        (["--given-from", str(tmp_path / "missing.json")], "--given-from: cannot read ", 4),
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "specgate", "search", "--impl", "oracle", "--out", str(tmp_path), *args],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert proc.returncode == status and proc.stdout == "", proc
        assert proc.stderr.startswith("specgate: --given-") and proc.stderr.count("\n") == 1, proc.stderr
        assert says in proc.stderr, proc.stderr


def _group(stage: str, outcome: str = "fail", **fields: str) -> dict:
    record = SimpleNamespace(
        stage=stage, outcome=outcome, model="qwen3-vocab", nodeid=f"{stage}[c]", message="m"
    )
    return triage.Group(f"{stage} · {outcome} · x", [record], **fields).as_dict()


def test_a_parity_reports_causes_are_taken_from_its_groups(tmp_path: Path) -> None:
    """``--given-from REPORT.json``: the catalogue names of its diagnosed tokenizer groups and
    the causes of its localized ones (a merged group's ``cause``, else its ``localized``
    line's); another stage's diagnosis is a note; a report of none is a usage error."""
    line = "special-token scan: the control token's text '<|im_end|>' was cut out as its own segment in plain mode (…)"
    groups = [
        _group("encode", diagnosis="normalizes the text to NFKC first"),
        _group(
            "encode",
            diagnosis="normalizes the text to NFC first; and it groups up to three digits "
            "(\\p{N}{1,3}, the cl100k/Llama 3 rule) where Qwen splits every digit",
        ),
        _group(
            "split",
            localized="pre-tokenizer: …: between a letter \\p{Ll} and a letter-number \\p{Nl}",
            cause=NL_CUT,
        ),
        _group("encode", localized=line),
        _group("render", diagnosis="drops the reasoning of earlier turns"),
        _group("decode", "error"),
        _group("encode", localized="not localized: every step of the pipeline agrees"),
    ]
    path = tmp_path / "parity.json"
    path.write_text(json.dumps({"groups": groups}), encoding="utf-8")
    names, causes, notes = from_report(path)
    assert names == ["nfkc", "nfc", "digits_in_threes"]
    assert causes == [NL_CUT, RARE]
    assert notes == [
        "not a tokenizer deviation, not taken as given: the engine drops the reasoning of earlier turns"
    ]
    path.write_text(json.dumps({"groups": groups[4:]}), encoding="utf-8")
    with pytest.raises(UnknownGiven, match=r"none of its 3 group\(s\) is a diagnosed tokenizer deviation"):
        from_report(path)
    path.write_text("[]", encoding="utf-8")
    with pytest.raises(UnknownGiven, match="not a parity report"):
        from_report(path)


def _search(defects: str, causes: list[str]) -> SearchResult:
    impl = planted(defects)
    engine = resolve(impl)
    try:
        result = run_search(
            engine, impl, stages=["encode"], budget=BUDGET, seed=0, database=None, clock=Ticks(),
            given_causes=causes,
        )  # fmt: skip
    finally:
        engine.close()
    assert result.given_causes == causes and sum(r.answered for r in result.runs) > 1000, result.runs
    return result


def _causes(result: SearchResult, tok: Tokenizer) -> list[str]:
    """The cause of each finding's minimized input, localized from the engine's answer."""
    return [
        cause_of(localize_encode(tok, f.input["text"], f.input["parse_special"], f.answers["engine"]))
        for f in result.findings
        if f.candidate.outcome == "fail"
    ]


@pytest.mark.slow
def test_the_rare_bug_is_found_given_the_frequent_bugs_localized_cause(
    tok: Tokenizer, tmp_path: Path
) -> None:
    """Same seed, same budget (``BUDGET`` clock readings, ~1,500 encode examples: fewer than the
    default ``--budget`` gives the encode stage, as ``test_given`` measured). Without the
    cause given, the frequent bug fills the findings (the astral bug ~700 times); whether the
    rare one also shows then depends on which examples the search draws (it did not where
    this test was written, it did in a fresh-clone CI run): not asserted. Given the cause,
    the rare bug is reported, minimized and confirmed, no finding is of the given cause,
    and the report counts the divergences it explained."""
    masked = _search("astral_fffd,control_text_cut", [])
    assert masked.findings and FREQUENT in _causes(masked, tok) and masked.explained == {}

    found = _search("astral_fffd,control_text_cut", [FREQUENT])
    assert RARE in _causes(found, tok) and FREQUENT not in _causes(found, tok), [
        f.input for f in found.findings
    ]
    rare = [f for f in found.findings if "<|" in f.input["text"]]
    assert rare and all(f.confirmation.verdict == confirm.ENGINE_DIVERGENCE for f in rare), [
        f.confirmation.as_dict() for f in rare
    ]
    assert min(len(f.input["text"]) for f in rare) <= 14  # minimized: " <|im_start|>" or so
    hits = max(f.candidate.hits for f in masked.findings)  # the signature's every later divergence
    assert found.explained[FREQUENT] > hits / 2 > 100, (found.explained, hits)  # the frequent bug's cases

    report.write(found, tmp_path)
    md = (tmp_path / f"{report.stem(found.impl)}.md").read_text(encoding="utf-8")
    n = found.explained[FREQUENT]
    assert f"{n} divergences explained by the given cause(s)" in md and f"- `{FREQUENT}`: {n}" in md, md
    payload = json.loads((tmp_path / f"{report.stem(found.impl)}.json").read_text(encoding="utf-8"))
    assert payload["given_causes"] == [FREQUENT] and payload["explained"] == {FREQUENT: n}
    assert payload["stages"][0]["explained"] == n


@pytest.mark.slow
def test_the_frequent_bug_alone_given_its_cause_finds_nothing_and_says_what_it_explained() -> None:
    """Nothing beyond the given cause is found — and the report says how much it explained,
    so an engine that still has the bug is never a silent clean bill."""
    alone = _search("astral_fffd", [FREQUENT])
    assert alone.findings == [], [(f.input, f.candidate.signature) for f in alone.findings]
    assert alone.explained.get(FREQUENT, 0) > 100, alone.explained
    assert set(alone.explained) == {FREQUENT}
    line = report.explained_line(alone)
    assert line.startswith(f"{alone.explained[FREQUENT]} divergences explained by the given cause(s)")
    assert "the engine still has the given causes' bugs" in line and line in report.markdown(alone)
