"""The crash-loop rules on their own (``specgate.run.crashloop``), fed the outcomes a run
records: two deaths on the first requests about a model (before any answer about it)
cut that model, every row, at once (issue 35) — one death there is a transient fault's,
one case; deaths about a model the engine answered about cut a row after three.
The end-to-end runs with a real dying engine are ``test_crash_loops.py``."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from impl.protocol import EngineDied, EngineError
from specgate.run.crashloop import (
    DEATHS_TO_CUT,
    MODEL_DEATHS_TO_CUT,
    CrashLoops,
    NotAsked,
    notes,
    worth_shrinking,
)

DEATH = EngineDied("cmd:x [./x]: the engine exited before answering request 1 (encode) (exit status 101)",
                   ["thread 'main' panicked at src/load.rs:9:5:", "cannot mmap the GGUF"])  # fmt: skip


def run(loops: CrashLoops, row: tuple[str, str], outcome: str, exc: BaseException | None = None) -> str:
    """One case: skipped if cut (its message), else recorded with ``outcome``."""
    try:
        loops.check(row)
    except NotAsked as cut:
        return cut.msg
    loops.saw(row, outcome, exc)
    return outcome


def test_a_death_on_the_first_request_about_a_model_cuts_every_row_of_it() -> None:
    loops = CrashLoops()
    assert run(loops, ("encode", "good"), "fail") == "fail"
    assert MODEL_DEATHS_TO_CUT == 2
    assert run(loops, ("encode", "bad"), "error", DEATH) == "error"
    assert run(loops, ("decode", "bad"), "error", DEATH) == "error", "one death may be a transient fault"
    for row in [("encode", "bad"), ("decode", "bad"), ("split", "bad"), ("logits/exact", "bad")]:
        said = run(loops, row, "error", DEATH)
        assert said.startswith("not asked: the engine died on its first 2 requests about model bad"), said
        assert "cannot mmap the GGUF" in said, "the death's reason, from its stderr"
    assert run(loops, ("decode", "good"), "pass") == "pass", "another model is asked as before"
    # the sampler's requests name no model: a death there is not a model's
    fresh = CrashLoops()
    for _ in range(DEATHS_TO_CUT):
        assert run(fresh, ("sample", "bad"), "error", DEATH) == "error"
    assert run(fresh, ("encode", "bad"), "pass") == "pass"


def test_deaths_about_a_model_answered_about_cut_its_row_after_three() -> None:
    loops = CrashLoops()
    assert run(loops, ("encode", "m"), "fail") == "fail"
    for _ in range(DEATHS_TO_CUT):
        assert run(loops, ("decode", "m"), "error", DEATH) == "error"
    assert run(loops, ("decode", "m"), "error", DEATH).startswith(
        "not asked: the engine died on 3 consecutive"
    )
    assert run(loops, ("split", "m"), "pass") == "pass", "only the row is cut"


def test_the_notes_say_one_line_per_model_with_its_reason() -> None:
    loops = CrashLoops()
    record = lambda stage, msg: SimpleNamespace(stage=stage, model="bad", outcome="error", message=msg)  # noqa: E731
    records = [record("encode", str(DEATH)), record("encode", str(DEATH))]
    run(loops, ("encode", "bad"), "error", DEATH)
    run(loops, ("encode", "bad"), "error", DEATH)
    records += [
        record(stage, run(loops, (stage, "bad"), "error", DEATH)) for stage in ("encode", "decode", "decode")
    ]
    (line,) = notes(records)
    assert line.startswith(
        "bad: the engine died on its first 2 requests about this model (a model it cannot load)"
    )
    assert "cannot mmap the GGUF" in line and line.endswith("3 more cases over 2 rows not asked (error)"), (
        line
    )
    group = SimpleNamespace(records=records, shrink_note="")
    assert worth_shrinking([group]) == [] and "a model it cannot load" in group.shrink_note, (
        "no replays of it"
    )


def test_an_error_the_engine_reported_makes_the_model_answered_about() -> None:
    loops = CrashLoops()
    assert run(loops, ("encode", "m"), "error", EngineError("cmd:x: encode: engine error: no")) == "error"
    assert run(loops, ("encode", "m"), "error", DEATH) == "error"
    assert run(loops, ("decode", "m"), "error", DEATH) == "error", "not cut: the model was answered about"
    assert run(loops, ("encode", "m"), "error", DEATH) == "error"


@pytest.mark.parametrize("model", ["constructs"])
def test_the_construct_templates_pseudo_model_is_not_a_model_loaded(model: str) -> None:
    loops = CrashLoops()
    for _ in range(DEATHS_TO_CUT):
        assert run(loops, ("render", model), "error", DEATH) == "error"
    assert run(loops, ("render", model), "error", DEATH).startswith(
        "not asked: the engine died on 3 consecutive"
    )
