"""``specgate.checks.logit_named``: an answer that names candidates at only some positions
(mistral.rs reports log-probs for the generated token alone, so its adapter names the
prompt's last position) is judged on those positions, never averaged with empty ones."""

from __future__ import annotations

import numpy as np

from impl.named_logprobs import NamedLogprobs
from specgate.checks.logit_named import compare_named


def record(rows: list[dict[int, float]]) -> dict[str, object]:
    """A snapshot record (top ids and log-probs per position, lse 0) of ``rows``."""
    return {
        "top_ids": [" ".join(str(i) for i in row) for row in rows],
        "top_logprobs": [" ".join(repr(float(np.log(p))) for p in row.values()) for row in rows],
        "lse": [0.0] * len(rows),
    }


def test_positions_named_nowhere_do_not_dilute_the_mean_kl() -> None:
    reference = record([{1: 0.9, 2: 0.1}] * 4)
    # the engine names only the last of four positions, and gets it badly wrong there
    last_only = NamedLogprobs.from_rows(
        [{}, {}, {}, {1: float(np.log(0.1)), 2: float(np.log(0.9))}], 10, "why"
    )
    cmp = compare_named(reference, [0, 1, 2, 3], last_only, tie_margin=1.0)
    every = NamedLogprobs.from_rows([{1: float(np.log(0.1)), 2: float(np.log(0.9))}] * 4, 10, "why")
    alone = compare_named(reference, [0, 1, 2, 3], every, tie_margin=1.0)
    # the mean over the judged position is that position's KL, as when every position says the same
    assert cmp.kl_mean == alone.kl_mean > 1.0
    assert cmp.unnamed_top1 == 3 and cmp.top1_agree_ties_excused == 0.0


def test_an_answer_that_names_nothing_anywhere_has_no_kl_to_report() -> None:
    cmp = compare_named(
        record([{1: 0.9, 2: 0.1}] * 2), [0, 1], NamedLogprobs.from_rows([{}, {}], 10, "why"), 1.0
    )
    assert cmp.kl_mean == cmp.kl_max == 0.0 and cmp.unnamed_top1 == cmp.positions == 2
