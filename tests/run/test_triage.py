"""Root-cause grouping and delta debugging (``specgate.run.triage``), on known inputs."""

from __future__ import annotations

import itertools
import subprocess
import sys
from dataclasses import dataclass

from impl.oracle import OracleEngine
from specgate.plugin import model_missing
from specgate.run import triage
from specgate.supply import models as model_cache
from specgate.upkeep import corpus, snapshots


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
    return Rec(stage, "qwen3-vocab", outcome, f"specgate/gates/x.py::t[qwen3-vocab/{case}]", message, case)


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
    assert groups[0].signature == "encode · fail · ids differ from <reference> on text <q>"
    assert "KeyError" in groups[1].signature and "ValueError" in groups[2].signature + groups[3].signature
    assert len({g.id for g in groups}) == 4


def test_a_recheck_message_has_the_kind_of_the_gate_message():
    """The re-check's message has no ``where:`` prefix; its signature must still match."""
    gate = encode_failure("ws/run", "a   b", 1, False)
    recheck = gate.split(": ", 1)[1]
    assert triage.signature("encode", "fail", recheck) == triage.record_signature(rec("ws/run", gate))


def repro_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "specgate.cli", "repro", *args], capture_output=True, text=True, timeout=120
    )


def test_repro_of_a_bad_file_is_one_line(tmp_path):
    missing = repro_cli(str(tmp_path / "nope.json"), "--impl", "oracle")
    not_repro = tmp_path / "x.json"
    not_repro.write_text('{"stage": "split"}', encoding="utf-8")
    wrong = repro_cli(str(not_repro), "--impl", "oracle")
    for proc, needle in ((missing, "cannot read"), (wrong, "is not a specgate reproducer: no model, input")):
        assert proc.returncode == 4 and needle in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


class DecodeDropsSpaces(OracleEngine):
    """The oracle with a planted decode defect: the space token (220) decodes to nothing."""

    name = "decode-drops-spaces"

    def decode(self, model, ids):
        return super().decode(model, [i for i in ids if i != 220])


class TemplateStrips(OracleEngine):
    """The oracle with a planted render_template defect: the output is stripped."""

    name = "template-strips"

    def render_template(self, template, context):
        return super().render_template(template, context).strip()


def shrink_one(engine, stage: str, model_id: str, case: str, message: str):
    group = triage.Group(
        triage.signature(stage, "fail", message, model_id, case), [rec(case, message, stage)]
    )
    group.records[0].model = model_id
    # The budgets count checks, not seconds (the clock ticks once a check): out of reach,
    # so how small the reproducer gets does not depend on the machine's load.
    shrinker = triage.Shrinker(
        engine, OracleEngine(), group_budget=100_000, total_budget=200_000, clock=itertools.count().__next__
    )
    repro = shrinker.reproduce(group)
    assert repro is None or not repro["shrinking"]["budget_ran_out"], repro["shrinking"]
    return repro, group


def test_a_decode_defect_shrinks_to_the_one_token_it_mangles():
    if "qwen3-vocab" not in model_cache.cached_models():
        model_missing("qwen3-vocab; run: specgate models fetch qwen3-vocab")
    model = triage.model_for("qwen3-vocab")
    ids = snapshots.load(model, "decode")["arabic"]["ids"]
    first = triage.recheck("decode", DecodeDropsSpaces(), OracleEngine(), model, {"ids": ids})
    assert first.outcome == "fail"
    message = f"[decode] model qwen3-vocab, case arabic: {first.message}"  # as the gate words it
    repro, group = shrink_one(DecodeDropsSpaces(), "decode", "qwen3-vocab", "arabic", message)
    assert repro is not None, group.shrink_note
    assert repro["input"] == {"ids": [220]} and repro["shrinking"]["from_size"] == len(ids)
    assert repro["engine_answer"] == "" and repro["oracle_answer"] == "20"


def test_a_construct_template_shrinks_by_characters():
    construct = corpus.constructs()["06_str_rsplit_no_sep"]
    template = construct["template"]
    inp = {"template": template, "context": construct["context"]}
    message = "stage render, constructs, case 06_str_rsplit_no_sep: "
    message += triage.recheck("render", TemplateStrips(), OracleEngine(), None, inp).message
    repro, group = shrink_one(TemplateStrips(), "render", "constructs", "06_str_rsplit_no_sep", message)
    assert repro is not None, group.shrink_note
    assert len(repro["input"]["template"]) <= 2 < len(template), repro["input"]
    assert repro["divergence"].startswith("rendered prompt differs from the oracle")


def test_one_cause_diagnosed_on_several_models_is_one_group() -> None:
    """Gating three vocabularies of an engine that decodes through a string gave three
    groups of one cause, one per model; they are one group, with every model's evidence."""
    from types import SimpleNamespace

    from specgate.outcomes.verdict import GateRecord

    def row(model: str, n: int, cause: str = "decodes through a string") -> SimpleNamespace:
        records = [GateRecord("decode", model, "fail", f"t[{model}/{i}]", "bytes differ") for i in range(n)]
        return SimpleNamespace(
            stage="decode", cause=cause, records=records, evidence=f"{n} of {n} on {model}"
        )

    diagnoses = [row("a", 3), row("b", 5), row("c", 2), row("c", 1, cause="adds a BOS")]
    groups = triage.group_records([r for d in diagnoses for r in d.records], diagnoses)
    assert [(g.diagnosis, len(g.records)) for g in groups] == [
        ("decodes through a string", 10),
        ("adds a BOS", 1),
    ]
    assert groups[0].evidence == "3 of 3 on a; 5 of 5 on b; 2 of 2 on c"
    assert sorted({r.model for r in groups[0].records}) == ["a", "b", "c"]
