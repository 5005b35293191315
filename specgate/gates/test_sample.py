"""Sample gate: the engine's sampler chain on the snapshot's logit windows vs llama.cpp's
sampler chain (documented order and semantics), candidate set and probabilities after
every step, then the final probabilities and the draw for the case's r. The comparison
is ``specgate.checks.sample``."""

import pytest

from specgate.checks import sample as checks
from specgate.outcomes.gate import call
from specgate.outcomes.judge import settle

pytestmark = pytest.mark.gate("sample")


def test_sample(engine, model_id, case_id, case):
    got = call(engine, "sample", checks.logits_of(case), case["params"], case["r"])
    where = f"[sample] model {model_id}, case {case_id}, params {checks.shown(case)}"
    settle("sample", case, lambda c: checks.check(c, got), where, None)
