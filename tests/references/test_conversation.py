"""Re-check the drift table's reference renders live: every turn of every multi-turn
conversation (``corpus/conversations/multi_turn``) rendered by transformers'
``apply_chat_template`` must equal ``snapshots/<model>/conversation.json`` (which the
fast tier holds the oracle's renders and ``docs/drift-table.md`` to). A change means
the reference moved: re-record with ``python -m specgate.upkeep.drift_table --record``
and regenerate the table."""

from __future__ import annotations

import pytest

from specgate.plugin import model_missing
from specgate.supply import models
from specgate.supply.models import model_ref
from specgate.upkeep import corpus, drift_table, snapshots

pytestmark = pytest.mark.live


@pytest.mark.parametrize("model_id", corpus.TEMPLATE_MODELS)
def test_transformers_still_renders_every_turn_as_recorded(model_id):
    pytest.importorskip("transformers")
    if model_id not in models.cached_models():
        model_missing(f"{model_id} (run: specgate models fetch)")
    model = model_ref(model_id)
    stored = snapshots.load(model, drift_table.STAGE)
    live = drift_table.reference_cases(model)
    assert sorted(stored) == sorted(live), "re-record: python -m specgate.upkeep.drift_table --record"
    for cid, case in live.items():
        problem = snapshots.exact(cid, stored[cid], case)
        assert problem is None, f"{model_id} {cid}: {problem}"
