"""The drift table (``docs/drift-table.md``) without transformers: every turn of every
multi-turn conversation renders in the oracle exactly as transformers rendered it
(``snapshots/<model>/conversation.json``, recorded with provenance by
``python -m specgate.upkeep.drift_table --record``; re-checked live by
``tests/references/test_conversation.py``), and the published table is what
``python -m specgate.upkeep.drift_table`` writes from those renders."""

from __future__ import annotations

import json

import pytest

from oracle import template as tpl
from specgate.plugin import model_missing
from specgate.supply import models
from specgate.supply.models import model_ref
from specgate.upkeep import corpus, drift_table, snapshots


def reference_cases(model_id: str) -> dict:
    if model_id not in models.cached_models():
        model_missing(f"{model_id} (run: specgate models fetch)")
    return snapshots.load(model_ref(model_id), drift_table.STAGE)


def renders_problem(model_id: str, conversation_id: str, case: dict) -> str | None:
    """None when the oracle renders every turn of the conversation as the reference did."""
    if "error" in case:
        return f"the reference refused the conversation: {case['error']}"
    got = drift_table.oracle_renders(model_id, case["conversation"])
    for turn, (want, have) in enumerate(zip(case["turns"], got, strict=True), start=1):
        for side in ("past", "new"):
            if want[side] != have[side]:
                at = tpl.parting(want[side], have[side])
                return f"{conversation_id} turn {turn} {side}: differs at {at}: {have[side][at : at + 40]!r}"
    return None


@pytest.mark.parametrize("model_id", corpus.TEMPLATE_MODELS)
def test_every_turn_renders_as_transformers_rendered_it(model_id):
    cases = reference_cases(model_id)
    conversations = corpus.multi_turn_conversations()
    assert sorted(cases) == sorted(conversations), "re-record: python -m specgate.upkeep.drift_table --record"
    for cid, case in cases.items():
        assert json.dumps(case["conversation"]) == json.dumps(conversations[cid]), f"{cid}: re-record"
        problem = renders_problem(model_id, cid, case)
        assert problem is None, problem


def test_the_render_check_catches_a_renderer_that_drops_reasoning(monkeypatch):
    """Planted: the renderer forgets ``reasoning_content``; Qwen3's reasoning turns differ."""
    cases = reference_cases("qwen3-vocab")
    cid = "06_reasoning_reply_turns"
    assert renders_problem("qwen3-vocab", cid, cases[cid]) is None
    original = tpl.prepare_messages
    monkeypatch.setattr(
        tpl,
        "prepare_messages",
        lambda ms: original([{k: v for k, v in m.items() if k != "reasoning_content"} for m in ms]),
    )
    assert renders_problem("qwen3-vocab", cid, cases[cid]) is not None


def test_the_published_table_is_current():
    for model_id in corpus.TEMPLATE_MODELS:
        reference_cases(model_id)  # the table is computed from renders checked above
    assert drift_table.DOC.read_text(encoding="utf-8") == drift_table.document(), (
        "docs/drift-table.md is stale: run python -m specgate.upkeep.drift_table"
    )


def test_check_fails_on_a_stale_table(tmp_path, monkeypatch, capsys):
    stale = tmp_path / "drift-table.md"
    stale.write_text(
        drift_table.DOC.read_text(encoding="utf-8").replace("| yes |", "| no |", 1), encoding="utf-8"
    )
    monkeypatch.setattr(drift_table, "DOC", stale)
    assert drift_table.main(["--check"]) == 1
    assert "stale" in capsys.readouterr().err


def test_one_row_is_reproduced_turn_by_turn(capsys):
    assert drift_table.main(["--model", "qwen3-vocab", "--conversation", "06_reasoning_reply_turns"]) == 0
    out = capsys.readouterr().out
    assert "turn 3: template drift at offset 63 (token 12)" in out
    assert "turn 3: the cache held" in out
