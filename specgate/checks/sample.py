"""Sample-gate cases: the logit vector a case feeds, and how a sampler result is
summarized and compared with the reference's.

A candidate set after a step can hold the whole vocabulary, so the snapshot keeps
per step: its size, an order-free digest of its ids, and the ``TOP`` most likely
candidates with their probabilities. The engine's full result is summarized the
same way; the sets must match exactly, the probabilities within ``PROB_TOL``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from specgate.checks.logits import QUANTIZED_TIE_MARGIN

#: Candidates (most likely first) whose probabilities a snapshot keeps per step.
TOP = 16

#: Probability tolerance. The reference (llama.cpp) computes in float32, the
#: oracle in float64 from the same float32 logits: the logits after a penalty or
#: temperature step differ by float32 rounding (relative 6e-8 of |logit| ≤ ~50,
#: i.e. ≤ 3e-6 absolute), which moves a probability by at most ~3e-6 × p.
#: Measured on the 0.5B snapshot: ≤ 1.9e-7. 1e-5 leaves room, and is still 100× below
#: the smallest effect a penalty or top-p step has on a probability in the grid.
PROB_TOL = 1e-5


def logits_of(case: Mapping[str, Any]) -> np.ndarray:
    """The float32 logit vector of a case: listed ids hold values, the rest -inf."""
    spec = case["logits"]
    x = np.full(spec["n_vocab"], -np.inf, dtype=np.float32)
    x[np.asarray(spec["ids"], dtype=np.int64)] = np.asarray(spec["values"], dtype=np.float32)
    return x


def digest(ids: Sequence[int]) -> str:
    """Order-free fingerprint of a candidate set."""
    return hashlib.sha256(",".join(map(str, sorted(int(i) for i in ids))).encode()).hexdigest()[:16]


def summarize_set(ids: Sequence[int], probs: Sequence[float]) -> dict[str, Any]:
    pairs = sorted(
        zip((int(i) for i in ids), (float(p) for p in probs), strict=True), key=lambda t: (-t[1], t[0])
    )
    return {"n": len(pairs), "digest": digest(ids), "top": [[i, p] for i, p in pairs[:TOP]]}


def summarize(result: Mapping[str, Any]) -> dict[str, Any]:
    """The snapshot form of a ``sample`` result."""
    return {
        "chain": list(result["chain"]),
        "steps": [{"step": s["step"], **summarize_set(s["ids"], s["probs"])} for s in result["steps"]],
        "final": summarize_set(result["ids"], result["probs"]),
    }


def expected_draw(ids: Sequence[int], probs: Sequence[float], r: float) -> tuple[int, float]:
    """The documented draw on the reference's final candidates (by descending
    probability, ties in id order): the first whose cumulative probability
    reaches ``r``. Also returns the distance of ``r`` from the nearest
    cumulative boundary; a draw that close is not compared."""
    pairs = sorted(zip(ids, probs, strict=True), key=lambda t: (-t[1], t[0]))
    cumulative = np.cumsum([p for _, p in pairs])
    index = int(np.searchsorted(cumulative, r, side="left"))
    token = int(pairs[min(index, len(pairs) - 1)][0])
    return token, float(np.min(np.abs(cumulative - r)))


def _compare_set(
    where: str, want: Mapping[str, Any], ids: Sequence[int], probs: Sequence[float]
) -> str | None:
    got = dict(zip((int(i) for i in ids), (float(p) for p in probs), strict=True))
    shown = [i for i, _ in want["top"]]
    if len(got) != want["n"] or digest(got) != want["digest"]:
        ranked = sorted(got, key=lambda i: (-got[i], i))
        missing = [i for i in shown if i not in got]
        return (
            f"{where}: candidate set differs — reference keeps {want['n']} tokens, engine {len(got)}; "
            f"reference top {shown[:8]}, engine top {ranked[:8]}"
            + (f"; reference tokens missing from the engine's set: {missing[:8]}" if missing else "")
        )
    for token, p in want["top"]:
        if abs(got[token] - p) > PROB_TOL:
            return (
                f"{where}: probability of token {token} is {got[token]:.8f}, reference {p:.8f} "
                f"(|diff| {abs(got[token] - p):.2e} > tolerance {PROB_TOL})"
            )
    return None


def compare(case: Mapping[str, Any], got: Mapping[str, Any]) -> str | None:
    """None when the engine's ``sample`` result matches the case; else the first
    difference: which step, what the candidate sets or probabilities are."""
    want_chain = [s["step"] for s in case["steps"]]
    got_chain = [s["step"] for s in got["steps"]]
    if got_chain != want_chain:
        return f"chain of steps differs: reference {want_chain}, engine {got_chain}"
    for k, (want, step) in enumerate(zip(case["steps"], got["steps"], strict=True)):
        problem = _compare_set(f"after step {k} ({want['step']})", want, step["ids"], step["probs"])
        if problem:
            return problem
    problem = _compare_set("final probabilities", case["final"], got["ids"], got["probs"])
    if problem:
        return problem
    if case.get("token") is not None and got.get("token") is not None and got["token"] != case["token"]:
        return (
            f"draw with r={case['r']}: engine drew {got['token']}, the documented draw gives {case['token']}"
        )
    return None


def check(case: Mapping[str, Any], got: Mapping[str, Any]) -> str | None:
    """The sample gate's judgement: ``compare``, with the case's note on how llama.cpp's
    native chain treats it when the engine departs."""
    problem = compare(case, got)
    if problem is not None and case.get("llamacpp_native"):
        problem += f"\n  (note: {case['llamacpp_native']})"
    return problem


def shown(case: Mapping[str, Any]) -> dict[str, Any]:
    """The case's parameters for a message, a long penalty window abbreviated."""
    params = case["params"]
    window = params.get("window", [])
    if len(window) > 10:
        return {**params, "window": f"{len(window)} ids, oldest {window[:2]} … newest {window[-3:]}"}
    return params


def stored_windows(cases: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The model windows a snapshot was recorded on. They are the sampler's inputs: the
    re-check runs llama.cpp's samplers on exactly these logits, because llama.cpp's
    forward gives other last bits on another CPU (its drift is the logits stage's
    re-check), while its samplers on the same logits must give the same candidates."""
    return {
        case_id.split("/")[0]: case["logits"]
        for case_id, case in cases.items()
        if "/" in case_id and not case_id.startswith("crafted-")
    }


def window_drift(name: str, stored: dict[str, Any] | None, live: np.ndarray) -> str | None:
    """A stored window against llama.cpp's live logits after the same prompt: every stored
    token within the loose logits gate's margin. Between an AVX-512 and an AVX2 machine
    they moved by ≤ 0.23 (0.5B model; ≤ 1e-3 on the tiny f32 ones); another prompt or
    model moves them by whole logits."""
    if stored is None:
        return f"window {name!r} is not in the snapshot"
    ids, want = np.asarray(stored["ids"]), np.asarray(stored["values"])
    delta = np.abs(live[ids] - want)
    worst = int(delta.argmax())
    if delta[worst] > QUANTIZED_TIE_MARGIN:
        return (
            f"window {name!r}: token {ids[worst]} has logit {want[worst]:.4f} in the snapshot, "
            f"{live[ids[worst]]:.4f} live (|Δ| > {QUANTIZED_TIE_MARGIN})"
        )
    return None
