"""Re-check the drift table's reference renders live: every turn of every multi-turn
conversation (``corpus/conversations/multi_turn``) rendered by transformers'
``apply_chat_template`` must equal ``snapshots/<model>/conversation.json`` (which the
fast tier holds the oracle's renders and ``docs/drift-table.md`` to). A change means
the reference moved: re-record with ``python -m specgate.upkeep.drift_table --record``
and regenerate the table. The session's ``hf`` reference renders (its tokenizer, built
from the GGUF once, is shared with the render recorder's)."""

from __future__ import annotations

import pytest

from specgate.upkeep import corpus, drift_table, snapshots

pytestmark = [
    pytest.mark.live,
    pytest.mark.applies_to.with_args(
        lambda model_id, _model_of: model_id in corpus.TEMPLATE_MODELS, models=True
    ),
]


def test_transformers_still_renders_every_turn_as_recorded(reference, model, model_id):
    stored = snapshots.load(model, drift_table.STAGE)
    live = drift_table.reference_cases(model, reference("hf"))
    assert sorted(stored) == sorted(live), "re-record: python -m specgate.upkeep.drift_table --record"
    assert any("turns" in case for case in live.values()), (
        f"{model_id}: transformers rendered no conversation"
    )
    for cid, case in live.items():
        problem = snapshots.exact(cid, stored[cid], case)
        assert problem is None, f"{model_id} {cid}: {problem}"
