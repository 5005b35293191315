"""A published root cause is *confirmed* only by a confirm entry that names that cause.

The groups below have the shapes the real reports carry (one group per diagnosed cause,
its ``signature`` naming the cause while ``divergence_signature`` — its first case's message
signature, with the reference masked — is shared by every render group; undiagnosed groups
split by where they first diverge, each with its first cases). An earlier mark matched an
entry by a part of a message signature and confirmed groups of other causes with it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from specgate import ecosystem
from specgate.ecosystem.confirm import ConfirmRun, covers, mark, parse, run_confirm
from specgate.ecosystem.spec import ConfirmedGroup, EngineSpec, diagnosis_cause, discover
from tests.ecosystem.engines import ORACLE, engine_folder

RENDERED = "render · fail · rendered prompt differs from <reference>"
STRIP = "ignores the argument of strip/lstrip/rstrip/trim: s.strip('\\n') strips all whitespace"


def diagnosed(stage: str, name: str, *cases: str) -> dict:
    """A group as triage writes it for the diagnosis ``name`` of ``stage``'s catalogue."""
    cause = diagnosis_cause(stage, name)
    return {
        "stage": stage,
        "outcome": "fail",
        "signature": f"{stage} · fail · the engine {cause}",
        "divergence_signature": RENDERED if stage == "render" else f"{stage} · fail · bytes differ",
        "diagnosis": cause,
        "first_cases": [f"specgate/gates/test_render.py::test_render[{c}]" for c in cases],
        "where": "",
    }


def undiagnosed(where: str, *cases: str, stage: str = "render") -> dict:
    return {
        "stage": stage,
        "outcome": "fail",
        "signature": f"{RENDERED} · {where}",
        "divergence_signature": RENDERED,
        "diagnosis": "",
        "first_cases": [f"specgate/gates/test_render.py::test_render_template[{c}]" for c in cases],
        "where": where,
    }


STRIP_GROUP = diagnosed(
    "render", "strip_args_ignored", "qwen3-vocab/31_reasoning_content_whitespace_tool_loop/gen"
)
TITLE_GROUP = undiagnosed("on a letter mid-text", "constructs/12_str_title_capitalize", "constructs/16_loop")
BOOLEANS_GROUP = undiagnosed("on a letter at the start", "constructs/22_is_defined_none_string")
GROUPS = [STRIP_GROUP, TITLE_GROUP, BOOLEANS_GROUP]
SAID = ConfirmRun(
    "node confirm.mjs",
    "ran",
    0,
    parse(
        "REPRODUCES: str.strip(chars) ignores its argument (construct 01): engine 'xy' vs reference ''\n"
        "REPRODUCES: title()/capitalize leave the rest of each word (constructs 12, 43): ...\n"
        "GONE: booleans print lowercase (constructs 16, 22-24): engine 'True', reference 'True'\n"
    ),
)


def marks(entries: list[ConfirmedGroup], run: ConfirmRun | None = SAID) -> list[str]:
    return [mark(g, entries, run, GROUPS)[0] for g in GROUPS]


def test_an_entry_for_one_cause_never_confirms_a_group_of_another() -> None:
    """The planted over-claim: every render group shares the masked message signature, so a
    signature part named them all; a cause named by its diagnosis or its cases names one."""
    strip = ConfirmedGroup(
        "render", ["str.strip(chars) ignores its argument"], diagnosis="strip_args_ignored"
    )
    assert marks([strip]) == [ecosystem.CONFIRMED, ecosystem.UNCONFIRMED, ecosystem.UNCONFIRMED]
    title = ConfirmedGroup(
        "render", ["title()/capitalize leave the rest"], cases=["constructs/12_str_title_capitalize"]
    )
    assert marks([title]) == [ecosystem.UNCONFIRMED, ecosystem.CONFIRMED, ecosystem.UNCONFIRMED]
    # A reproduction of cause A named with the diagnosis of cause B confirms nothing of A.
    wrong = ConfirmedGroup("render", ["str.strip(chars) ignores its argument"], diagnosis="js_booleans")
    assert marks([wrong]) == [ecosystem.UNCONFIRMED] * 3
    # Both named: the group must be that diagnosis and hold those cases.
    both = ConfirmedGroup(
        "render",
        ["str.strip(chars) ignores its argument"],
        diagnosis="strip_args_ignored",
        cases=["constructs/12_str_title_capitalize"],
    )
    assert marks([both]) == [ecosystem.UNCONFIRMED] * 3
    # Another stage's group of the same diagnosis name is another cause.
    assert not covers(strip, {**STRIP_GROUP, "stage": "split"})
    # A group diagnosed with an alternative it cannot be told from is not named by one of them.
    either = {**STRIP_GROUP, "diagnosis": STRIP + " — or, equally (these cases cannot tell them apart), it x"}
    assert not covers(strip, either)


def test_an_entry_covering_two_different_causes_confirms_neither() -> None:
    """Never one entry for two causes: were a case named by an entry held by two groups (it
    cannot be in one report; a hand-made table could), both stay unconfirmed, saying why."""
    shared = ConfirmedGroup("render", ["title()/capitalize leave the rest"], cases=["constructs/16_loop"])
    twin = undiagnosed("on a digit mid-text", "constructs/16_loop")
    groups = [TITLE_GROUP, twin]
    for group in groups:
        status, why = mark(group, [shared], SAID, groups)
        assert status == ecosystem.UNCONFIRMED and "covers 2 different causes" in why, why
    assert mark(TITLE_GROUP, [shared], SAID, [TITLE_GROUP])[0] == ecosystem.CONFIRMED


def test_a_gone_or_missing_divergence_fails_the_confirmation() -> None:
    booleans = ConfirmedGroup(
        "render", ["booleans print lowercase"], cases=["constructs/22_is_defined_none_string"]
    )
    status, why = mark(BOOLEANS_GROUP, [booleans], SAID, GROUPS)
    assert (status, why) == (ecosystem.FAILS, "`node confirm.mjs`: 'booleans print lowercase' GONE")
    missing = ConfirmedGroup(
        "render", ["none prints as the empty string"], cases=["constructs/22_is_defined_none_string"]
    )
    status, why = mark(BOOLEANS_GROUP, [missing], SAID, GROUPS)
    assert status == ecosystem.FAILS and why.endswith("'none prints as the empty string' missing"), why
    # A name is the start of what a line names, not any part of the line.
    inside = ConfirmedGroup("render", ["ignores its argument"], diagnosis="strip_args_ignored")
    assert mark(STRIP_GROUP, [inside], SAID, GROUPS)[0] == ecosystem.FAILS
    # Two entries for one group: each one's divergences must reproduce.
    strip = ConfirmedGroup(
        "render", ["str.strip(chars) ignores its argument"], diagnosis="strip_args_ignored"
    )
    assert mark(STRIP_GROUP, [strip, inside], SAID, GROUPS)[0] == ecosystem.FAILS
    # Not run at all, or did not report.
    assert mark(STRIP_GROUP, [strip], None, GROUPS)[0] == ecosystem.FAILS
    timeout = ConfirmRun("node confirm.mjs", "timeout", None, SAID.lines, "did not finish within 120 s")
    assert mark(STRIP_GROUP, [strip], timeout, GROUPS)[0] == ecosystem.FAILS


def test_a_missing_confirm_script_fails_the_confirmation(tmp_path: Path) -> None:
    """The script named by [confirm] command is not there: the run is an error, the group
    it would confirm is called out as *confirm fails* (never confirmed, never silent)."""
    folder = engine_folder(tmp_path, "nosuch", ORACLE, stages=("encode",))
    with (folder / "engine.toml").open("a", encoding="utf-8") as toml:
        toml.write(
            '[confirm]\ncommand = "{python} {here}/confirm.py"\n[[confirm.groups]]\nstage = "encode"\n'
            'cases = ["qwen3-vocab/combining-compat/special"]\ndivergences = ["encode answers"]\n'
        )
    spec = EngineSpec.load(folder)
    run = run_confirm(spec, 60, {})
    assert run is not None and run.status == "error" and run.exit_code == 2, run
    assert "confirm.py" in run.output and run.lines == [], run
    group = {
        "stage": "encode",
        "outcome": "fail",
        "signature": "encode · fail · ids differ from <reference> on text <q> · in a whitespace run",
        "first_cases": [
            "specgate/gates/test_tokenizer.py::test_encode[qwen3-vocab/combining-compat/special]"
        ],
    }
    status, why = mark(group, spec.confirm_groups, run, [group])
    assert status == ecosystem.FAILS and why.startswith(f"`{Path(sys.executable).name} "), why


@pytest.mark.parametrize(
    ("entry", "error"),
    [
        (
            'signature = "rendered prompt differs"\ndivergences = ["x"]\n',
            "unknown key.*signature.*not by a signature",
        ),
        ('divergences = ["x"]\n', "names no cause: give diagnosis and/or cases"),
        (
            'diagnosis = "no_such_bug"\ndivergences = ["x"]\n',
            "unknown diagnosis 'no_such_bug'; known: .*strip_args",
        ),
        ('diagnosis = "strip_args_ignored"\n', "'divergences' must be a non-empty list"),
    ],
)
def test_a_confirm_entry_that_names_no_precise_cause_is_refused(
    tmp_path: Path, entry: str, error: str
) -> None:
    folder = engine_folder(tmp_path, "vague", ORACLE)
    with (folder / "engine.toml").open("a", encoding="utf-8") as toml:
        toml.write(f'[confirm]\ncommand = "{{python}} x.py"\n[[confirm.groups]]\nstage = "render"\n{entry}')
    with pytest.raises(ecosystem.EcosystemError, match=error):
        EngineSpec.load(folder)


def group_shapes(stage: str) -> list[dict]:
    """Every diagnosed group a report can hold for ``stage``: one per hypothesis of its catalogue."""
    from specgate.diagnose.diagnoser import hypotheses_of

    return [diagnosed(stage, h.name) for h in hypotheses_of(stage)]


ENTRIES = [
    pytest.param(spec.key, n, entry, id=f"{spec.key}-{n}")
    for spec in map(EngineSpec.load, discover())
    for n, entry in enumerate(spec.confirm_groups, 1)
]


@pytest.mark.parametrize(("engine", "number", "entry"), ENTRIES)
def test_each_engine_confirm_entry_names_exactly_one_cause(
    engine: str, number: int, entry: ConfirmedGroup
) -> None:
    """Each [[confirm.groups]] entry of impl/ecosystem/: a diagnosis names exactly one of the
    diagnosed group shapes of its stage; each case it names is a case of the corpus (so a
    report's group can hold it, and one group only); no two entries of an engine name one cause."""
    from specgate import stages
    from specgate.run.triage import REPLAYABLE, case_input
    from specgate.upkeep.recorded_cases import recorded_case

    if entry.diagnosis:
        assert sum(covers(entry, g) for g in group_shapes(entry.stage)) == 1, entry
    for case in entry.cases:
        model, _, case_id = case.partition("/")
        # a conformance class's row names its cases as the gate's node ids do: `<case>-<class>`
        _, _, conformance_class = entry.stage.partition("/")
        if conformance_class:
            assert case_id.endswith(f"-{conformance_class}"), f"{engine}: {case} lacks -{conformance_class}"
            case_id = case_id.removesuffix(f"-{conformance_class}")
        record = SimpleNamespace(stage=entry.stage, model=model, case=case_id)
        found = (
            case_input(record)
            if entry.stage in REPLAYABLE
            else recorded_case(record, stages.stage_of(entry.stage).snapshot)
        )
        assert found is not None, f"{engine}: {case} is no {entry.stage} case of the corpus"
    spec = EngineSpec.load(ecosystem.spec.ECOSYSTEM_DIR / engine)
    others = [e for i, e in enumerate(spec.confirm_groups, 1) if i != number]
    assert all(
        (o.stage, o.diagnosis, sorted(o.cases)) != (entry.stage, entry.diagnosis, sorted(entry.cases))
        for o in others
    )


def test_the_engine_entries_no_longer_name_message_signatures() -> None:
    """The folders' entries load (an entry naming a signature part is refused) and each one
    names a cause: the old entries confirmed every render group of an engine at once."""
    specs = [EngineSpec.load(f) for f in discover()]
    entries = [e for s in specs for e in s.confirm_groups]
    assert entries and all(e.diagnosis or e.cases for e in entries)
    # The over-claim of the old entries, replayed on the shapes above: one entry, one group.
    hf_jinja = next(s for s in specs if s.key == "hf_jinja")
    said = ConfirmRun(
        "x", "ran", 0, [("REPRODUCES", name) for e in hf_jinja.confirm_groups for name in e.divergences]
    )
    for entry in hf_jinja.confirm_groups:
        assert sum(mark(g, [entry], said, GROUPS)[0] == ecosystem.CONFIRMED for g in GROUPS) <= 1, entry
    assert marks(hf_jinja.confirm_groups, said) == [ecosystem.CONFIRMED] * 3


def test_a_saved_table_is_marked_again_by_the_entries_as_they_are_now(tmp_path: Path) -> None:
    """``remark`` reads a real run's saved table and reports back and marks them with the
    folders' entries now: an entry edited to name another case un-confirms the group; the
    saved folder itself is never written over."""
    from specgate.ecosystem.cli import main
    from specgate.ecosystem.remark import counts, remark
    from tests.ecosystem.engines import wrong_engine

    root = tmp_path / "engines"
    folder = wrong_engine(root, "wrong", confirm_says="REPRODUCES")
    saved = tmp_path / "run" / "reports"
    table = ecosystem.run_all(root, saved, budget=300, extra=["--max-cases", "3", "--shrink-budget", "5"])
    assert counts(table) == {ecosystem.CONFIRMED: 1}, [r.message for r in table.rows]
    again = remark(saved / "ecosystem.json", tmp_path / "same", root)
    assert counts(again) == {ecosystem.CONFIRMED: 1}
    toml = folder / "engine.toml"
    toml.write_text(
        toml.read_text(encoding="utf-8").replace("arabic/plain", "arabic/special"), encoding="utf-8"
    )
    assert (
        main(
            ["remark", str(saved / "ecosystem.json"), "--out", str(tmp_path / "edited"), "--root", str(root)]
        )
        == 0
    )
    markdown = (tmp_path / "edited" / "ecosystem.md").read_text(encoding="utf-8")
    assert "| wrong | 1 | fail: encode | 3 | not confirmed |" in markdown, markdown
    assert "- REPRODUCES: encode answers [0]" in markdown  # the saved confirm lines are still shown
    with pytest.raises(ecosystem.EcosystemError, match="the saved table's own folder"):
        remark(saved / "ecosystem.json", saved, root)
