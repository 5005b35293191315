"""Comparing logits: max |Δlogit|, KL(reference ‖ engine), top-1 agreement with near-tie excuses.

Two forms of the reference:

* full logits [T, n_vocab] (live references, ``compare_full``);
* a snapshot record (``topk_record``): per recorded position the reference's top-k
  token ids, their log-probabilities and the log-sum-exp of all logits. From it
  ``compare_topk`` recovers the reference logits of those k tokens
  (``logprob + lse``) and bounds the KL divergence from below by lumping the
  remaining vocabulary into one "other" outcome: by the log-sum inequality
  (coarse-graining never increases KL),

      KL(p ‖ q) >= Σ_top-k p_i log(p_i / q_i) + p_rest log(p_rest / q_rest)

  so a snapshot gate can only under-estimate the divergence, never invent one.

Top-1 agreement excuses near ties: when the engine's top token is not the
reference's, but the reference scores it within ``tie_margin`` of its own top
token, the position is a near tie — counted apart, not as a disagreement.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

SIGNIFICANT_DIGITS = 7  # float32 has ~7.2 significant decimal digits


def log_softmax(logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(log-probabilities, log-sum-exp) along the last axis, computed in float64."""
    z = np.asarray(logits, dtype=np.float64)
    m = z.max(axis=-1, keepdims=True)
    lse = m + np.log(np.exp(z - m).sum(axis=-1, keepdims=True))
    return z - lse, lse[..., 0]


def all_finite(a: np.ndarray) -> bool:
    """Whether every element of a float array is finite. A NaN or an infinity makes the
    sum NaN or infinite, so a finite sum proves it in one pass with no [T, n_vocab]
    mask; only a sum that is not finite (or overflowed) has the elements looked at."""
    with np.errstate(over="ignore", invalid="ignore"):
        if np.isfinite(np.add.reduce(a, axis=None)):
            return True
    return bool(np.isfinite(a).all())


def record_positions(n: int, limit: int) -> list[int]:
    """Every position of a short sequence; ``limit`` evenly spaced ones (first and last
    included) of a longer one — long prompts would otherwise dominate snapshot size."""
    if n <= limit:
        return list(range(n))
    return sorted({round(float(x)) for x in np.linspace(0, n - 1, limit)})


def _round(x: float) -> float:
    return float(f"{x:.{SIGNIFICANT_DIGITS}g}")


#: Positions whose float64 log-probabilities exist at once while a record is taken or a
#: comparison made (32 x 152k x 8 bytes: 39 MB); a 512-position answer in one piece was
#: 0.6 GB per float64 copy, and a comparison made several (issue 38).
CHUNK_POSITIONS = 32


def topk_record(logits: np.ndarray, positions: Sequence[int], k: int) -> dict[str, Any]:
    """The snapshot form of reference logits at ``positions``. Each position's k ids and
    k log-probs are one space-separated string, keeping the JSON at one line per position."""
    positions = list(positions)
    tops, values, lses = [], [], []
    for start in range(0, len(positions), CHUNK_POSITIONS):
        logp, lse = log_softmax(logits[positions[start : start + CHUNK_POSITIONS]])
        top = np.argsort(-logp, axis=-1, kind="stable")[:, :k]
        tops.extend(top.tolist())
        values.extend(np.take_along_axis(logp, top, axis=-1))
        lses.extend(lse)
        del logp
    return {
        "top_ids": [" ".join(map(str, row)) for row in tops],
        "top_logprobs": [" ".join(f"{v:.{SIGNIFICANT_DIGITS}g}" for v in row) for row in values],
        "lse": [_round(v) for v in lses],
    }


def parse_record(record: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(top ids [P, k], top log-probs [P, k], lse [P]) from a ``topk_record``."""
    ids = np.array([row.split() for row in record["top_ids"]], dtype=np.int64)
    logprobs = np.array([row.split() for row in record["top_logprobs"]], dtype=np.float64)
    return ids, logprobs, np.asarray(record["lse"], dtype=np.float64)


@dataclass
class Comparison:
    positions: int
    max_abs_dlogit: float  # over all tokens (full) or the reference's top-k (snapshot)
    kl_mean: float  # KL(reference ‖ engine) per position, mean (a lower bound from a snapshot)
    kl_max: float
    top1_agree: float  # fraction of positions where the top tokens agree
    near_ties: int  # disagreements excused as near ties
    disagreements: list[dict[str, Any]]  # the unexcused ones: position, tokens, logits
    unnamed_top1: int = 0  # positions whose top-1 the engine left unnamed (``specgate.checks.logit_named``)

    @property
    def top1_agree_ties_excused(self) -> float:
        """The top-1 agreement a verdict judges: near ties (reference margin below the
        class's tie margin) count as agreeing; positions whose top-1 the engine left
        unnamed are not judged (``specgate.checks.logit_named``)."""
        judged = self.positions - self.unnamed_top1
        return 1.0 - len(self.disagreements) / judged if judged > 0 else 1.0

    def metrics(self) -> dict[str, float]:
        return {k: v for k, v in asdict(self).items() if isinstance(v, float)}


def compare_full(ref: np.ndarray, got: np.ndarray, tie_margin: float, chunk: int = 32) -> Comparison:
    """Engine logits ``got`` vs reference logits ``ref``, both [T, n_vocab] (float64 in
    chunks of ``chunk`` positions: a 512 × 152k float64 copy alone would be 0.6 GB)."""
    if np.shape(got) != np.shape(ref):
        raise ValueError(f"engine logits have shape {np.shape(got)}, reference {np.shape(ref)}")
    kl, max_abs, agree, ties, bad = [], 0.0, 0, 0, []
    for start in range(0, len(ref), chunk):
        r = np.asarray(ref[start : start + chunk], dtype=np.float64)
        g = np.asarray(got[start : start + chunk], dtype=np.float64)
        lp, _ = log_softmax(r)
        lq, _ = log_softmax(g)
        kl.extend((np.exp(lp) * (lp - lq)).sum(axis=-1))
        max_abs = max(max_abs, float(np.abs(g - r).max()))
        r_top, g_top = r.argmax(-1), g.argmax(-1)
        agree += int((r_top == g_top).sum())
        for t in np.flatnonzero(r_top != g_top):
            margin = float(r[t, r_top[t]] - r[t, g_top[t]])
            if margin < tie_margin:
                ties += 1
            else:
                bad.append({"position": start + int(t), "reference_top": int(r_top[t]),
                            "engine_top": int(g_top[t]), "reference_margin": margin})  # fmt: skip
    return Comparison(
        positions=len(ref),
        max_abs_dlogit=max_abs,
        kl_mean=float(np.mean(kl)),
        kl_max=float(np.max(kl)),
        top1_agree=agree / len(ref),
        near_ties=ties,
        disagreements=bad,
    )


def compare_topk(
    record: dict[str, Any], positions: Sequence[int], got: np.ndarray, tie_margin: float
) -> Comparison:
    """Engine logits ``got`` vs a snapshot ``record`` taken at ``positions``: ``got``'s row t
    is the engine's at ``positions[t]`` ([len(positions), n_vocab], ``specgate.checks.
    logits.asked_rows``)."""
    got = np.asarray(got)
    positions = list(positions)
    if len(got) != len(positions):
        raise ValueError(f"{len(got)} rows of engine logits for {len(positions)} recorded positions")
    ids, lp, lse = parse_record(record)
    ref_logits = lp + lse[:, None]
    # the recorded rows only, a chunk at a time in float64: their top-k's logits and
    # log-probabilities and their top-1 are all that is kept
    sel, lq, g_top = np.empty(ids.shape), np.empty(ids.shape), np.empty(len(ids), dtype=np.int64)
    for start in range(0, len(positions), CHUNK_POSITIONS):
        rows = slice(start, start + CHUNK_POSITIONS)
        g = np.asarray(got[rows], dtype=np.float64)
        sel[rows] = np.take_along_axis(g, ids[rows], axis=-1)
        g_top[rows] = g.argmax(-1)
        # log_softmax(g) read at the recorded ids only: z[ids] - lse, lse = m + log Σ exp(z - m)
        # (the same float64 operations, in place: no [rows, n_vocab] log-probability array)
        m = np.take_along_axis(g, g_top[rows, None], axis=-1)
        g -= m
        np.exp(g, out=g)
        lq[rows] = sel[rows] - (m + np.log(g.sum(axis=-1, keepdims=True)))
        del g
    p, q = np.exp(lp), np.exp(lq)
    p_rest = np.clip(1.0 - p.sum(-1), 1e-300, None)
    q_rest = np.clip(1.0 - q.sum(-1), 1e-300, None)
    kl = (p * (lp - lq)).sum(-1) + p_rest * np.log(p_rest / q_rest)
    kl = np.maximum(kl, 0.0)  # rounding of the stored log-probs can push an exact 0 slightly below
    ties, bad = 0, []
    for t in range(len(ids)):
        if g_top[t] == ids[t, 0]:
            continue
        in_topk = np.flatnonzero(ids[t] == g_top[t])
        # outside the reference's top-k the engine's choice scores at most the k-th logit,
        # so the margin used is a lower bound (an excuse is given a little too readily)
        ref_score = ref_logits[t, in_topk[0]] if in_topk.size else ref_logits[t, -1]
        if ref_logits[t, 0] - ref_score < tie_margin:
            ties += 1
        else:
            bad.append({"position": int(positions[t]), "reference_top": int(ids[t, 0]), "engine_top": int(g_top[t]),
                        "reference_margin": float(ref_logits[t, 0] - ref_score)})  # fmt: skip
    return Comparison(
        positions=len(ids),
        max_abs_dlogit=float(np.abs(sel - ref_logits).max()),
        kl_mean=float(kl.mean()),
        kl_max=float(kl.max()),
        top1_agree=float((g_top == ids[:, 0]).mean()),
        near_ties=ties,
        disagreements=bad,
    )
