"""The state stages against planted state bugs (``mutants/state_bugs.py``): each mutant,
a real ``cmd:`` process, fails the state stage its bug breaks — and the cases that bug
cannot touch pass — while the oracle served the same way passes every case; an engine
without the ``session`` capability is n/a. Each case is played and judged exactly as
the gates do (``specgate.checks.state``), on one tiny model's committed snapshots, in
the exact class (the quantized one reads the same answers).

Every state diagnosis of the catalogue (``specgate.diagnose.state``) names its planted bug,
and a look-alike (``noisy_append``) is not diagnosed: each mutant's failing cases are
diagnosed by the run's diagnoser with that same process, as triage does after a run. The
oracle served the same way is diagnosed with nothing, and its answers played the
diagnosis' way are the knob-free sessions' own. Each engine plays its cases once for both
(``runs``). ``tests/diagnose/test_state_diagnoses.py`` reads a diagnosis back from a
parity run's reports."""

from __future__ import annotations

import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from impl.process.client import CmdEngine
from specgate.checks import state
from specgate.checks.logits import QUANTIZED_KL_MEAN
from specgate.diagnose import state as catalogue
from specgate.outcomes.gate import NotApplicable
from specgate.outcomes.verdict import GateRecord
from specgate.stages import state_cases
from specgate.upkeep import snapshots
from tests.engines.fault_engine import ToyEngine

MUTANTS = Path(__file__).with_name("mutants") / "state_bugs.py"
MODEL = "tiny-qwen2-f32"
STAGES = (
    ("state_incremental", state.play_incremental, state.judge_incremental),
    ("state_conversation", state.play_conversation, state.judge_conversation),
    ("state_reuse", state.play_reuse, state.judge_reuse),
    ("state_generate", state.play_generate, state.judge_generate),
    ("state_batch", state.play_batch, state.judge_batch),
)
NOTHING: dict[str, dict[str, str]] = {stage: {} for stage, _, _ in STAGES}
BUGS = (
    "no_truncate",
    "position_off_by_one",
    "sessions_shared",
    "chunk_boundary",
    "prefix_cache",
    "prefix_off_by_one",
    "fork_aliased",
    "seed_carried",
    "last_not_held",
    "batch_padded",
    "batch_sorted",
    "noisy_append",
)
#: The mutants whose tests are in the slow tier: each engine costs ~3-5 s (a process, every
#: state case played, its failures diagnosed), and the fast tier keeps one bug per state stage
#: (no_truncate, chunk_boundary, prefix_off_by_one, last_not_held, batch_sorted), the prefix
#: cache done right and the diagnosis' look-alike; CI's slow tier runs every one.
SLOW_MUTANTS = frozenset(
    {"position_off_by_one", "sessions_shared", "fork_aliased", "seed_carried", "batch_padded"}
)
CAUSE = {h.name: h.cause for h in catalogue.CATALOGUE}
SESSION_ROWS = ("state_incremental/exact", "state_conversation/exact", "state_reuse/exact")
DIAGNOSED_ROWS = (*SESSION_ROWS, "state_batch/exact")  # state_generate's failures are the
# other stages' bugs seen through the decode loop: no diagnosis of the catalogue names them

#: planted bug -> the rows it fails, and per row the diagnosis that must name every failing
#: case of it; the look-alike (the right logits plus noise after an append) fails both
#: rows — where the position bug does — and nothing may name it
PLANTED: dict[str, tuple[tuple[str, ...], dict[str, str]]] = {
    "no_truncate": (("state_conversation/exact",), {"state_conversation/exact": "no_truncate"}),
    "sessions_shared": (SESSION_ROWS, {row: "sessions_shared" for row in SESSION_ROWS}),
    "position_off_by_one": (SESSION_ROWS, {row: "position_off_by_one" for row in SESSION_ROWS}),
    "chunk_boundary": (SESSION_ROWS, {row: "chunk_boundary" for row in SESSION_ROWS}),
    "prefix_off_by_one": (SESSION_ROWS[1:], {"state_reuse/exact": "prefix_off_by_one"}),
    "fork_aliased": (SESSION_ROWS[1:], {"state_reuse/exact": "fork_aliased"}),
    "batch_padded": (DIAGNOSED_ROWS[3:], {"state_batch/exact": "batch_padded"}),
    "batch_sorted": (DIAGNOSED_ROWS[3:], {"state_batch/exact": "batch_sorted"}),
    "noisy_append": (SESSION_ROWS, {}),
}
#: planted bug -> the failing cases its diagnosis leaves out: a prefix cache's, failing in the
#: run through what sessions of *earlier* cases left in its pool (a conversation's first turn
#: started from another case's KV; a branch from a fork's clobbered cache). The diagnosis
#: plays a case after ``POOL`` empty sessions and its priming one — none of them leave
#: anything to reuse wrongly — so the engine answers these right there and none is named
UNNAMED: dict[str, dict[str, set[str]]] = {
    "prefix_off_by_one": {"state_reuse/exact": {"branch_cut_back"}},
    "fork_aliased": {"state_reuse/exact": {"branch_after_close", "branch_cut_back"}},
}


@pytest.fixture(scope="module")
def model(tiny_model: Any) -> Any:
    return tiny_model


def played(engine: Any, model: Any) -> list[GateRecord]:
    """Every state case of ``model`` played on one engine in the gate's order and judged as
    the gates judge it, in the exact class (the quantized one reads the same answers)."""
    records = []
    for stage, play, judge in STAGES:
        row = f"{stage}/exact"
        for case_id, case in snapshots.load(model, stage).items():
            why = judge("exact", model.id, case, play(engine, model, case))
            outcome = "fail" if why else "pass"
            records.append(GateRecord(row, model.id, outcome, f"{row}::{case_id}", why or "", case=case_id))
    return records


def failures(records: list[GateRecord]) -> dict[str, dict[str, str]]:
    """stage -> {case id: failure message} of every failing case."""
    out: dict[str, dict[str, str]] = {stage: {} for stage, _, _ in STAGES}
    for r in records:
        if r.outcome == "fail":
            out[r.stage.removesuffix("/exact")][r.case] = r.message
    return out


def served(*argv: str) -> CmdEngine:
    return CmdEngine(shlex.join([sys.executable, *argv]))


@dataclass(frozen=True)
class MutantRun:
    records: list[GateRecord]  # every state case, played and judged
    diagnoses: list[Any]  # the diagnoses of its failing cases (the catalogue's rows only)
    asked: dict[str, Any]  # the oracle's only: per diagnosed case, its answers asked the diagnosis' way


def run_engine(name: str, model: Any) -> MutantRun:
    """One engine — the oracle over ``cmd:`` or a mutant — its state cases played once, and
    the failing ones diagnosed by the run's diagnoser (``specgate.diagnose.diagnoser``) with
    that same process, as triage does after a run."""
    from specgate.diagnose.diagnoser import Diagnoser
    from specgate.run.triage import case_input
    from specgate.upkeep.model_ids import model_for

    argv = ("-m", "specgate.cli", "engine", "--impl", "oracle") if name == "oracle" else (str(MUTANTS), name)
    engine = served(*argv)
    try:
        records = played(engine, model)
        diagnoser = Diagnoser(engine, case_input, model_for, budget=600.0)
        diagnoses = diagnoser.diagnose([r for r in records if r.stage in DIAGNOSED_ROWS])
        assert not diagnoser.notes, (name, diagnoser.notes)
        asked = {
            r.nodeid: catalogue.ask(engine, r.stage, model, catalogue.case_input(r))
            for r in records
            if name == "oracle" and r.stage in DIAGNOSED_ROWS
        }
    finally:
        engine.close()
    return MutantRun(records, diagnoses, asked)


class Runs(dict[str, MutantRun]):
    """Each engine's ``run_engine``, made when a test first reads it and kept for the module:
    the tier that deselects every test of a mutant never starts that mutant."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.model = model

    def __missing__(self, name: str) -> MutantRun:
        if name not in ("oracle", *BUGS):
            raise KeyError(name)
        self[name] = run = run_engine(name, self.model)
        return run


class Failures(dict[str, dict[str, dict[str, str]]]):
    """Per engine, its failing cases: stage -> {case id: message} (read from ``Runs``)."""

    def __init__(self, runs: Runs) -> None:
        super().__init__()
        self.runs = runs

    def __missing__(self, name: str) -> dict[str, dict[str, str]]:
        self[name] = found = failures(self.runs[name].records)
        return found


@pytest.fixture(scope="module")
def runs(model: Any) -> Runs:
    return Runs(model)


@pytest.fixture(scope="module")
def found(runs: Runs) -> Failures:
    return Failures(runs)


def test_the_oracle_over_cmd_passes_every_state_case(found, runs) -> None:
    assert found["oracle"] == NOTHING
    assert runs["oracle"].diagnoses == []


def test_the_oracles_answers_played_the_diagnosis_way_are_the_knob_free_sessions(model, runs) -> None:
    sessions = catalogue.reference(model)
    oracle = runs["oracle"]
    assert len(oracle.asked) == sum(r.stage in DIAGNOSED_ROWS for r in oracle.records) > 0
    for r in oracle.records:
        if r.stage in DIAGNOSED_ROWS:
            inp, asked = catalogue.case_input(r), oracle.asked[r.nodeid]
            assert inp is not None, r.nodeid
            assert catalogue.same(r.stage, catalogue.answer(r.stage, sessions, inp, {}), asked), r.nodeid
            assert asked.held == [None] * len(asked.rows)


def test_every_state_hypothesis_of_the_catalogue_is_planted_here() -> None:
    assert {name for _, named in PLANTED.values() for name in named.values()} == set(CAUSE)
    assert set(PLANTED) <= set(BUGS)


@pytest.mark.parametrize(
    "bug", [pytest.param(b, marks=[pytest.mark.slow] if b in SLOW_MUTANTS else []) for b in PLANTED]
)
def test_a_planted_state_bug_is_diagnosed_by_name_and_a_look_alike_is_not(runs, bug) -> None:
    records, found = [r for r in runs[bug].records if r.stage in DIAGNOSED_ROWS], runs[bug].diagnoses
    fails, named = PLANTED[bug]
    failing = {row: [r for r in records if r.stage == row and r.outcome == "fail"] for row in DIAGNOSED_ROWS}
    assert {row for row in DIAGNOSED_ROWS if failing[row]} == set(fails)
    assert {d.stage: d.name for d in found} == named, [(d.stage, d.name, len(d.records)) for d in found]
    for d in found:
        assert not d.alternatives, d.cause
        unnamed = UNNAMED.get(bug, {}).get(d.stage, set())
        assert unnamed <= {r.case for r in failing[d.stage]}
        named_cases = {r.nodeid for r in failing[d.stage] if r.case not in unnamed}
        assert {r.nodeid for r in d.records} == named_cases  # every failing case but those
        n, m = len(named_cases), len(failing[d.stage])
        assert d.evidence.startswith(
            f"{n} of {m} failing {d.stage} cases of {MODEL} equal the oracle's sessions played the same way "
        ), d.evidence
        assert (
            f" when it {CAUSE[d.name]}, with the same session counts and, at every judged point, "
            in d.evidence
        )
        m = re.search(r"max \|Δlogit\| ≤ ([\d.e-]+)\): measured max \|Δlogit\| ([\d.e+-]+), "
                      r"against the spec'd oracle ([\d.e+-]+)$", d.evidence)  # fmt: skip
        assert m, d.evidence
        tol, to_deviated, to_spec = map(float, m.groups())
        assert to_deviated <= tol < to_spec, d.evidence


def test_kv_kept_across_a_drift_fails_the_conversation_stage_naming_the_drift(found) -> None:
    got = found["no_truncate"]
    assert got["state_incremental"] == {}  # nothing is truncated there
    # every conversation that drops KV — two template drifts, a seam — and none that does not
    assert set(got["state_conversation"]) == {
        "03_system_prompt_changes", "04_system_prompt_added_later", "20_assistant_leading_newlines"
    }  # fmt: skip
    message = got["state_conversation"]["03_system_prompt_changes"]
    assert message.startswith(
        "turn 3: the engine kept 37 KV tokens of the past render that the new render replaces (offset 29: "
    ), message
    assert "You are a pirate." in message and "You are a butler." in message
    assert "a fresh prefill differs by KL" in message
    assert "a seam at token 34" in got["state_conversation"]["20_assistant_leading_newlines"]


@pytest.mark.slow  # a mutant of SLOW_MUTANTS
def test_a_position_off_by_one_after_an_append_fails_the_chunked_prompts(found) -> None:
    got = found["position_off_by_one"]
    assert set(got["state_incremental"]) == {
        "chat_basic_one_by_one", "chat_basic_uneven", "raw_en_one_by_one", "raw_en_uneven"
    }  # fmt: skip
    assert "one-shot prefill" in got["state_incremental"]["raw_en_uneven"]


@pytest.mark.slow  # a mutant of SLOW_MUTANTS
def test_kv_not_cleared_between_sessions_fails_every_session_after_the_first(found) -> None:
    got = found["sessions_shared"]["state_incremental"]
    assert len(got) == 5 and "chat_basic_one_by_one" not in got  # the first case's session is new
    assert all("before its first append (KV of an earlier session kept?)" in m for m in got.values())


@pytest.mark.slow  # a mutant of SLOW_MUTANTS
def test_a_new_session_inheriting_the_last_one_fails_the_branch_opened_after_it(found) -> None:
    got = found["sessions_shared"]["state_reuse"]
    assert {"branch_after_close", "drift_after_close", "branch_cut_back", "drift_cut_back"} <= set(got)
    assert "session b holds" in got["branch_after_close"] or "expected 30" in got["branch_after_close"]


def test_a_prefix_cache_done_right_passes_every_state_case(found) -> None:
    """Reusing another session's KV is allowed: copied, cut to the shared prefix, the rest
    evaluated. The stages judge what is read, not whether something was reused."""
    assert found["prefix_cache"] == NOTHING


def test_a_prefix_cache_keeping_the_first_differing_token_fails_the_branches(found) -> None:
    got = found["prefix_off_by_one"]["state_reuse"]
    assert set(got) == {
        "branch_after_close", "branch_side_by_side", "branch_cut_back", "drift_after_close", "drift_side_by_side"
    }  # fmt: skip
    message = got["drift_after_close"]
    assert message.startswith(
        "session b holding 66 tokens, the first 6 shared with session a (which differs from token 6 on): "
        "a fresh prefill differs by KL"
    ), message


@pytest.mark.slow  # a mutant of SLOW_MUTANTS
def test_a_fork_sharing_its_cache_fails_the_sessions_open_together(found) -> None:
    got = found["fork_aliased"]["state_reuse"]
    assert {"branch_side_by_side", "branch_interleaved", "drift_side_by_side", "drift_interleaved"} <= set(
        got
    )
    assert got["branch_interleaved"].startswith("session a holding 30 tokens"), got["branch_interleaved"]


@pytest.mark.slow  # a mutant of SLOW_MUTANTS
def test_a_sampler_stream_carried_across_requests_fails_the_warm_seeded_generation(found) -> None:
    got = found["seed_carried"]
    assert {stage: set(cases) for stage, cases in got.items() if cases} == {
        "state_generate": {"01_plain_chat_seeded", "03_system_prompt_changes_seeded"}
    }  # greedy draws nothing: the same stream warm and cold
    assert got["state_generate"]["01_plain_chat_seeded"].startswith(
        "the warm (a second session over the prompt, after the first was closed) generation departs from the "
        "cold one: first divergence at index 0"
    )


def test_a_last_emitted_id_left_out_of_the_cache_fails_every_generation(found) -> None:
    got = found["last_not_held"]
    assert {stage: len(cases) for stage, cases in got.items() if cases} == {"state_generate": 4}
    assert got["state_generate"]["01_plain_chat_greedy"] == (
        "after the cold generation the session holds 37 tokens, expected 38 (the prompt's 30 and the 8 emitted)"
    )


@pytest.mark.slow  # a mutant of SLOW_MUTANTS
def test_generation_from_a_session_fails_where_the_state_bug_reaches_it(found) -> None:
    """The earlier bugs show in the decode loop too: a truncate that keeps the KV when
    generating again, a session inheriting the last one's, the position off by one after
    every step; a chunk boundary never does (every step appends one token)."""
    assert len(found["no_truncate"]["state_generate"]) == 4
    assert (
        "after the again generation the session holds 46 tokens"
        in (found["no_truncate"]["state_generate"]["01_plain_chat_greedy"])
    )
    assert len(found["sessions_shared"]["state_generate"]) == 4
    assert len(found["position_off_by_one"]["state_generate"]) == 4
    assert found["chunk_boundary"]["state_generate"] == {}


@pytest.mark.slow  # a mutant of SLOW_MUTANTS
def test_unmasked_padding_in_a_batch_fails_every_batch_of_different_lengths(found) -> None:
    got = found["batch_padded"]
    assert {stage: set(cases) for stage, cases in got.items() if cases} == {
        "state_batch": {"mixed", "reversed", "one_token_and_longest", "duplicates"}
    }
    assert got["state_batch"]["mixed"].startswith(
        "prompt 1 of 4 (raw_en, 10 tokens; the batch's longest has 30)"
    )


def test_rows_answered_in_length_order_fail_the_batches_asked_in_another(found) -> None:
    got = found["batch_sorted"]["state_batch"]
    assert set(got) == {
        "mixed",
        "reversed",
        "one_token_and_longest",
        "duplicates",
    }  # none asked in length order
    assert "differs from its one-shot prefill alone by KL" in got["reversed"]


def test_a_chunk_boundary_bug_fails_the_uneven_chunks_only(found) -> None:
    got = found["chunk_boundary"]
    assert set(got["state_incremental"]) == {"chat_basic_uneven", "raw_en_uneven"}
    assert got["state_conversation"]  # every later turn is a block appended after cached tokens


def test_an_engine_without_sessions_is_not_applicable(model: Any) -> None:
    class NoSessions(ToyEngine):
        capabilities = frozenset({"logits"})

    case = next(iter(snapshots.load(model, "state_incremental").values()))
    with pytest.raises(NotApplicable, match="does not offer 'session'"):
        state.play_incremental(NoSessions(), model, case)


def test_the_measured_values_beside_the_verdict_are_the_worst_judged_point(model: Any) -> None:
    """``state.measured``, the report's metrics column: for the oracle, float noise at every
    judged point; for a position off by one, the chunked prompt's KL is far outside the
    quantized class, and a conversation reports its worst turn."""
    cases = snapshots.load(model, "state_incremental")
    conversation = snapshots.load(model, "state_conversation")["03_system_prompt_changes"]
    got = {}
    for name, argv in [("oracle", ("-m", "specgate.cli", "engine", "--impl", "oracle")),
                       ("off_by_one", (str(MUTANTS), "position_off_by_one"))]:  # fmt: skip
        engine = served(*argv)
        try:
            chunked = state.play_incremental(engine, model, cases["raw_en_uneven"])
            turns = state.play_conversation(engine, model, conversation)
        finally:
            engine.close()
        got[name] = (
            state.measured("exact", model.id, cases["raw_en_uneven"], chunked),
            state.measured("exact", model.id, conversation, turns),
            [state.measured("exact", model.id, {**conversation, "turns": [t]}, state.Played([r], [None]))
             for t, r in zip(conversation["turns"], turns.rows, strict=True)],
        )  # fmt: skip
    oracle, off = got["oracle"], got["off_by_one"]
    assert set(oracle[0]) == {"max_abs_dlogit", "kl_mean", "top1_agree_ties_excused"}
    assert oracle[0]["kl_mean"] < 1e-9 and oracle[0]["max_abs_dlogit"] < 1e-3, oracle
    assert off[0]["kl_mean"] > QUANTIZED_KL_MEAN, off
    per_turn = off[2]
    assert off[1]["kl_mean"] == max(m["kl_mean"] for m in per_turn) > QUANTIZED_KL_MEAN
    assert off[1]["top1_agree_ties_excused"] == min(m["top1_agree_ties_excused"] for m in per_turn)


def test_a_failing_chunked_prompt_shrinks_to_the_smallest_one_that_still_fails(model: Any) -> None:
    """state_incremental is replayable (``specgate.stages.state.replay_incremental``): the
    position bug's failing uneven case, shrunk as triage shrinks, is three tokens appended as
    2 + 1 — the fewest whose uneven chunking appends after cached tokens (two are one chunk)
    — and the oracle passes that input."""
    from impl.oracle import OracleEngine
    from specgate import stages
    from specgate.run.triage import shrink

    case = snapshots.load(model, "state_incremental")["raw_en_uneven"]
    inp = stages.case_input("state_incremental/exact", case, False)
    assert inp == {"ids": case["ids"], "chunking": "uneven"}
    oracle, engine = OracleEngine(), served(str(MUTANTS), "position_off_by_one")
    try:

        def fails(candidate: dict[str, Any]) -> bool:
            return (
                stages.replay("state_incremental/exact", engine, oracle, model, candidate).outcome == "fail"
            )

        small = shrink(inp, fails)
    finally:
        engine.close()
    assert len(small["ids"]) == 3 and small["chunking"] == "uneven", small
    assert state_cases.chunkings(3)["uneven"] == [2, 1]
    assert stages.replay("state_incremental/exact", oracle, oracle, model, small).outcome == "pass"
