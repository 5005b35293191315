"""Judging a ``logits`` answer that names only some candidates (``impl.named_logprobs``):
a server that names its top-k by text cannot tell which id an ambiguous text is, so
the probability of those candidates is an unnamed remainder. Nothing is assumed about
how that remainder is split; each position is judged on the ids the engine named.

* KL: the vocabulary is coarse-grained into the reference's top-k ids that the engine
  named, each on its own, and one "rest" outcome (everything else, the unnamed
  remainder included). By the log-sum inequality (as ``compare_topk`` does for "other")

      KL(p ‖ q) >= Σ_named p_i log(p_i / q_i) + p_rest log(p_rest / q_rest)

  so the gate can under-estimate the divergence, never invent one.
* a position where the engine names no candidate at all (an engine that reports log-probs
  only for some positions) is not judged: it counts as an unnamed top-1 and stays out of
  the mean KL, which it would otherwise dilute with a bound of 0.
* top-1: the engine's top candidate is known when its best named id b has at least
  the unnamed mass u (no unnamed candidate can beat it); it is known *not* to be the
  reference's top r when the engine named r below another named id. Otherwise the
  position's top-1 is *unnamed*: counted apart (``unnamed_top1``), never as agreement
  and never as a disagreement.
* max |Δ|: over the named reference top-k, in log-probabilities (a server gives no
  normalizer, so its logits are known only up to a constant per position).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from impl.named_logprobs import NamedLogprobs
from specgate.checks.logit_metrics import Comparison, parse_record

#: The named probabilities may exceed 1 by rounding (a server's float32 log-probs).
MASS_SLACK = 1e-3


def well_formed(n_ids: int, got: NamedLogprobs) -> str | None:
    """None when ``got`` is a sound named answer for ``n_ids`` positions; else what is wrong."""
    if got.ids.ndim != 2 or got.ids.shape != got.logprobs.shape or len(got.ids) != n_ids:
        return f"named log-probs of shape {got.ids.shape}/{got.logprobs.shape}, expected [{n_ids}, k]"
    named = got.ids >= 0
    if (got.ids[named] >= got.n_vocab).any() or (got.ids < -1).any():
        return f"named ids outside the vocabulary of {got.n_vocab}"
    values = got.logprobs[named]
    if not np.isfinite(values).all() or (values > MASS_SLACK).any():
        return "named log-probabilities must be finite and at most 0"
    for t in range(len(got.ids)):
        row = got.ids[t][named[t]]
        if len(set(row.tolist())) != len(row):
            return f"an id named twice at position {t}"
        mass = float(np.exp(got.logprobs[t][named[t]]).sum())
        if mass > 1.0 + MASS_SLACK:
            return f"the named probabilities at position {t} sum to {mass:.6f} > 1"
    return None


def compare_named(
    record: dict[str, Any], positions: Sequence[int], got: NamedLogprobs, tie_margin: float
) -> Comparison:
    """The named answer ``got`` vs a snapshot ``record`` taken at ``positions``: ``got``'s
    row t is the engine's at ``positions[t]``."""
    if len(got) != len(positions):
        raise ValueError(f"{len(got)} rows of named log-probs for {len(positions)} recorded positions")
    ref_ids, lp, lse = parse_record(record)
    ref_logits = lp + lse[:, None]
    kl, max_abs, agree, ties, unnamed_top1, bad = [], 0.0, 0, 0, 0, []
    for t, pos in enumerate(positions):
        named = got.row(t)
        if not named:  # nothing said about this position: neither judged nor averaged in
            unnamed_top1 += 1
            continue
        q_named = {i: float(np.exp(v)) for i, v in named.items()}
        u = max(0.0, 1.0 - sum(q_named.values()))
        both = [j for j, i in enumerate(ref_ids[t].tolist()) if i in named]
        p = np.exp(lp[t, both])
        lq = np.array([named[int(ref_ids[t, j])] for j in both], dtype=np.float64)
        p_rest = max(1.0 - float(p.sum()), 1e-300)
        q_rest = max(1.0 - float(np.exp(lq).sum()), 1e-300)
        kl.append(max(float((p * (lp[t, both] - lq)).sum()) + p_rest * np.log(p_rest / q_rest), 0.0))
        if both:
            max_abs = max(max_abs, float(np.abs(lq - lp[t, both]).max()))
        r = int(ref_ids[t, 0])
        best = max(q_named, key=q_named.__getitem__) if q_named else None
        if best is not None and q_named[best] >= u:
            top = best  # no unnamed candidate can beat it
        elif best is not None and r in q_named and q_named[r] < q_named[best]:
            top = best  # not the reference's, whichever the unnamed ones are
        else:
            unnamed_top1 += 1
            continue
        if top == r:
            agree += 1
            continue
        hit = np.flatnonzero(ref_ids[t] == top)
        # outside the reference's top-k the engine's choice scores at most the k-th logit
        margin = float(ref_logits[t, 0] - (ref_logits[t, hit[0]] if hit.size else ref_logits[t, -1]))
        if margin < tie_margin:
            ties += 1
        else:
            bad.append(
                {"position": int(pos), "reference_top": r, "engine_top": top, "reference_margin": margin}
            )
    judged = len(positions) - unnamed_top1
    return Comparison(
        positions=len(positions),
        max_abs_dlogit=max_abs,
        kl_mean=float(np.mean(kl)) if kl else 0.0,
        kl_max=float(np.max(kl)) if kl else 0.0,
        top1_agree=agree / judged if judged else 0.0,
        near_ties=ties,
        disagreements=bad,
        unnamed_top1=unnamed_top1,
    )
