"""Sampler parameter sets and logit windows for the sample stage.

Logit vectors are small (a few candidates, the rest of a small vocabulary at
``-inf``) and drawn from few values, so ties are common: tied candidates at the
top-k boundary, equal probabilities whose cumulative sum meets ``top_p``
exactly (four equal logits and ``top_p = 0.5``), ``min_p`` thresholds met
exactly. Parameters come from the values the documented chain treats as edges
(``top_k`` 0 and 1, ``top_p`` 1, temperature 0 and near 0, penalties with
windows holding repeated, excluded and out-of-vocabulary ids).
"""

from __future__ import annotations

import math
from typing import Any

from hypothesis import strategies as st

_LOGIT_VALUES = (0.0, 0.0, 1.0, 1.0, 2.0, -1.0, 0.5, math.log(2.0), math.log(3.0), 3.25, -math.inf)


def _logits(n_vocab: int) -> st.SearchStrategy[dict[str, Any]]:
    values = st.lists(
        st.sampled_from(_LOGIT_VALUES) | st.floats(-8, 8, width=32), min_size=1, max_size=n_vocab
    )

    def window(vs: list[float]) -> dict[str, Any]:
        finite = [(i, v) for i, v in enumerate(vs) if math.isfinite(v)] or [(0, 0.0)]
        return {"n_vocab": n_vocab, "ids": [i for i, _ in finite], "values": [v for _, v in finite]}

    return values.map(window)


def _params(n_vocab: int) -> st.SearchStrategy[dict[str, Any]]:
    ids = st.integers(0, n_vocab - 1) | st.just(n_vocab + 3)  # an id past the vocabulary
    return st.fixed_dictionaries(
        {},
        optional={
            "temperature": st.sampled_from([0.0, 1e-7, 0.3, 0.8, 1.0, 1.7]),
            "top_k": st.sampled_from([0, 1, 2, 3, 5, 40]),
            "top_p": st.sampled_from([1.0, 0.95, 0.75, 0.5, 0.25, 0.9, 0.0]),
            "min_p": st.sampled_from([0.0, 0.05, 0.25, 0.5]),
            "repeat_penalty": st.sampled_from([1.0, 1.1, 2.0]),
            "frequency_penalty": st.sampled_from([0.0, 0.5]),
            "presence_penalty": st.sampled_from([0.0, 0.4]),
            "penalty_last_n": st.sampled_from([0, 2, 64]),
            "window": st.lists(ids, max_size=6),
        },
    )


def sample_inputs(n_vocab: int = 8) -> st.SearchStrategy[dict[str, Any]]:
    """``{"logits": {n_vocab, ids, values}, "params", "r"}`` as the sample gate's cases."""
    r = st.sampled_from([0.5, 0.1, 0.9, 0.25, 0.75]) | st.floats(0.001, 0.999)
    return st.fixed_dictionaries({"logits": _logits(n_vocab), "params": _params(n_vocab), "r": r})
