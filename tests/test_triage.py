"""Root-cause grouping and delta debugging (``specgate.triage``), on known inputs."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from specgate import triage


def test_ddmin_finds_the_two_elements_that_matter():
    """Zeller's example shape: the failure needs both 3 and 7, wherever they are."""
    calls = []

    def fails(items):
        calls.append(list(items))
        return 3 in items and 7 in items

    assert triage.ddmin(list(range(10)), fails) == [3, 7]
    assert [] not in calls  # the empty input is never tried


def test_ddmin_result_is_one_minimal_and_keeps_order():
    """Removing any single element of the result makes it pass (1-minimality)."""

    def fails(chars):
        text = "".join(chars)
        return "a" in text and text.index("a") < text.rfind("b")  # an "a" before a "b"

    result = triage.ddmin(list("xxbxxaxxxbxx"), fails)
    assert "".join(result) == "ab"
    for i in range(len(result)):
        assert not fails(result[:i] + result[i + 1 :])


def test_ddmin_stops_when_out_of_time_with_a_failing_input():
    budget = itertools.count()

    def fails(items):
        if next(budget) >= 3:
            raise triage.OutOfTime
        return 5 in items

    result = triage.ddmin(list(range(64)), fails)
    assert 5 in result and len(result) < 64


@dataclass
class Rec:
    stage: str
    model: str
    outcome: str
    nodeid: str
    message: str
    case: str


def rec(case: str, message: str, stage: str = "encode", outcome: str = "fail") -> Rec:
    return Rec(stage, "qwen3-vocab", outcome, f"tests/gates/x.py::t[qwen3-vocab/{case}]", message, case)


def encode_failure(case: str, text: str, at: int, special: bool) -> str:
    return (
        f"[encode] model qwen3-vocab, case {case} (parse_special={special}): ids differ from llama_tokenize "
        f"on text {text!r}\nfirst divergence at index {at} (reference length 9, engine length 8)\n"
        f"  reference: … 1=b'a' [2=b'  '] …\n  engine:    … [3=b' '] …"
    )


def test_one_defect_in_many_cases_is_one_group_and_other_kinds_are_not():
    records = [
        rec("arabic/plain", encode_failure("arabic/plain", "مرحبا  x", 3, False)),
        rec("code/py", encode_failure("code/py", 'say "hi"  x', 12, True)),
        rec("ws/run", encode_failure("ws/run", "a   b", 1, False)),
        rec("ws/run", "[decode] model qwen3-vocab, case ws/run: bytes differ at byte 3", stage="decode"),
        rec("x/y", "oracle.encode raised KeyError: 'x'", outcome="error"),
        rec("x/z", "oracle.encode raised KeyError: 'zz'", outcome="error"),
        rec("x/w", "oracle.encode raised ValueError: 'zz'", outcome="error"),
        rec("p/q", "this engine refuses", outcome="refused"),  # refusals are grouped by message elsewhere
    ]
    groups = triage.group_records(records)
    assert [len(g.records) for g in groups] == [3, 2, 1, 1]
    assert groups[0].signature == "encode · fail · ids differ from llama_tokenize on text <q>"
    assert "KeyError" in groups[1].signature and "ValueError" in groups[2].signature + groups[3].signature
    assert len({g.id for g in groups}) == 4


def test_a_recheck_message_has_the_kind_of_the_gate_message():
    """The re-check's message has no ``where:`` prefix; its signature must still match."""
    gate = encode_failure("ws/run", "a   b", 1, False)
    recheck = gate.split(": ", 1)[1]
    assert triage.signature("encode", "fail", recheck) == triage.record_signature(rec("ws/run", gate))
