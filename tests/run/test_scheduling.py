"""A gate run on two pytest-xdist workers hands out one unit per stage and model
(``specgate.run.scheduling``): each unit's cases — both conformance classes of a case,
every case of a generate prompt — run on one worker, whose answers they share, and the
units go out in the run's order. Shown on a real ``specgate parity -n 2`` run."""

from __future__ import annotations

import re
from collections import defaultdict

import pytest

from specgate.run.scheduling import stage_scope
from tests.engines.parity_run import run_parity


@pytest.mark.parametrize(
    ("nodeid", "scope"),
    [
        ("g/test_logits.py::test_logits[qwen2.5-coder-0.5b-instruct/long_code_512-exact]",
         "g/test_logits.py::test_logits[qwen2.5-coder-0.5b-instruct"),
        ("g/test_logits.py::test_logits[qwen2.5-coder-0.5b-instruct/chat_zh-quantized]",
         "g/test_logits.py::test_logits[qwen2.5-coder-0.5b-instruct"),
        ("g/test_logits.py::test_logits[tiny-qwen2-f32/chat_zh-exact]", "g/test_logits.py::test_logits[tiny-qwen2-f32"),
        ("g/test_generate.py::test_generate[tiny-qwen2-f32/greedy/code-exact]",
         "g/test_generate.py::test_generate[tiny-qwen2-f32"),
        ("tests/x.py::test_plain", "tests/x.py::test_plain"),
        ("g/test_state.py::test_state_reuse[qwen2.5-coder-0.5b-instruct/drift_cut_back-exact]",
         "g/test_state.py::test_state_*[qwen2.5-coder-0.5b-instruct"),
        ("g/test_state.py::test_state_chat[qwen2.5-coder-0.5b-instruct/22_whitespace_only_turns-quantized]",
         "g/test_state.py::test_state_*[qwen2.5-coder-0.5b-instruct"),
        ("g/test_state.py::test_state_batch[tiny-qwen3-f32/reversed-exact]", "g/test_state.py::test_state_*[tiny-qwen3-f32"),
    ],
)  # fmt: skip
def test_a_unit_is_one_gate_function_on_one_model(nodeid, scope):
    assert stage_scope(nodeid) == scope


@pytest.mark.slow  # a two-worker parity run of three stages on two models (~20 s)
def test_two_workers_each_run_whole_units_and_both_work(tmp_path):
    """A unit is a gate function on one model, the state stages of one model one unit."""
    pytest.importorskip("xdist")
    models = "tiny-qwen2-f32,tiny-qwen3-f32"
    run = run_parity(
        tmp_path, "oracle", "logits,generate,state_reuse,state_conversation", models, "-n", "2", "-vv"
    )  # -q -vv: one line per test
    assert run.status == 0, run.output[-3000:]
    workers: dict[str, set[str]] = defaultdict(set)
    functions = set()
    for worker, test, params in re.findall(
        r"\[(gw\d)\] \[\s*\d+%\] PASSED \S+::(\w+)\[([^\]]+)\]", run.output
    ):
        functions.add(test)
        unit = "state stages" if test.startswith("test_state_") else test
        workers[f"{unit}[{params.split('/')[0]}"].add(worker)
    assert {"test_state_reuse", "test_state_conversation"} <= functions
    assert len(workers) == 6, sorted(workers)  # three units on two models: every unit ran
    split = {unit: sorted(w) for unit, w in workers.items() if len(w) > 1}
    assert not split, f"units run on more than one worker: {split}"
    assert set().union(*workers.values()) == {"gw0", "gw1"}, "one worker did all the work"


def test_the_run_end_is_written_once_by_the_controller_with_every_workers_cases(tmp_path):
    """The matrix, the shrinking and the reports are the run's end: the controller makes
    them from both workers' records; a worker (whose terminal nobody reads) makes none."""
    pytest.importorskip("xdist")
    writers = tmp_path / "writers.txt"
    run = run_parity(
        tmp_path, "oracle", "split,decode", "qwen3-vocab", "-n", "2", "-vv", "-p", "tests.run.report_writers",
        env={"SPECGATE_TEST_WRITERS": str(writers)},
    )  # fmt: skip
    assert run.status == 0, run.output[-3000:]
    assert {"gw0", "gw1"} <= set(re.findall(r"\[(gw\d)\] \[\s*\d+%\] PASSED", run.output)), run.output[-3000:]
    assert writers.read_text(encoding="utf-8").split() == ["controller"]
    gated = len(re.findall(r"PASSED \S+::test_(?:split|decode)\[", run.output))
    assert gated > 100 and len(run.report["cases"]) == gated
