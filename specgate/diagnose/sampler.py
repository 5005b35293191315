"""The sample stage's catalogue: known deviations applied to the oracle's sampler chain.

A deviation is a setting of one *knob* of the chain (``oracle.sampler``): where the
temperature is applied (first, or before the filters), the order of top-p and min-p, a
requested ``chain`` ignored, top-p stopping at a cumulative probability ≥ p, min-p
measured against something else than the top probability (the temperature-scaled
distribution, or an absolute floor). (top-k keeping exactly k at a tie is llama.cpp's
own behaviour, the primary reference: a reference disagreement, never a failure.)
``sample`` below is the oracle's ``sampler.sample`` with the knobs applied — the oracle
itself is untouched, and with no knobs the answer is the oracle's (``tests/diagnose``
checks that on every recorded case). Inputs are the gate's own: ``{"logits", "params",
"r"}`` of a sample snapshot case.

Answers are compared as the sample gate compares them (``specgate.checks.sample``):
the same steps, candidate sets exactly, probabilities within ``PROB_TOL``, and the draw
unless ``r`` lies within ``DRAW_MARGIN`` of a cumulative boundary.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from oracle import sampler
from specgate.checks.sample import PROB_TOL, expected_draw, logits_of
from specgate.diagnose.tokenizer import Hypothesis, _h

#: What the evidence of a diagnosis says the deviated answers were compared with.
REFERENCE = "the oracle's sampler chain (which agrees with llama.cpp's)"
#: A draw whose r lies this close to a cumulative boundary is not compared (the gate's rule).
DRAW_MARGIN = 1e-4

# ---------------------------------------------------------------------------
# the deviated steps


def top_p_reaching(logits: np.ndarray, p: Mapping[str, Any]) -> np.ndarray:
    """top-p stopping where the cumulative probability *reaches* p (≥), not where it
    exceeds it: when a prefix sums to exactly p, the token that would cross p is dropped."""
    nucleus = p["top_p"]
    if nucleus <= 0.0 or nucleus >= 1.0:
        return logits
    probs = sampler.softmax(logits)
    order = np.argsort(-probs, kind="stable")
    crossed = np.flatnonzero(np.cumsum(probs[order]) >= nucleus)
    n_keep = crossed[0] + 1 if len(crossed) else len(order)
    out = np.full_like(logits, -np.inf)
    out[order[:n_keep]] = logits[order[:n_keep]]
    return out


def min_p_scaled(logits: np.ndarray, p: Mapping[str, Any]) -> np.ndarray:
    """min-p measured on the temperature-scaled distribution: p_i ≥ min_p × p_max after
    dividing the logits by T, i.e. logits ≥ max + T·ln(min_p)."""
    if p["min_p"] <= 0.0:
        return logits
    return np.where(logits >= logits.max() + p["temperature"] * math.log(p["min_p"]), logits, -np.inf)


def min_p_absolute(logits: np.ndarray, p: Mapping[str, Any]) -> np.ndarray:
    """min-p as an absolute floor: p_i ≥ min_p, not min_p × the top probability (the
    argmax always survives)."""
    if p["min_p"] <= 0.0:
        return logits
    probs = sampler.softmax(logits)
    keep = (probs >= p["min_p"]) | (np.arange(len(logits)) == np.argmax(logits))
    return np.where(keep, logits, -np.inf)


def _steps(knobs: Mapping[str, Any]) -> dict[str, Any]:
    steps = dict(sampler.STEPS)
    if knobs.get("top_p_reaching"):
        steps["top_p"] = top_p_reaching
    if knobs.get("min_p") == "scaled":
        steps["min_p"] = min_p_scaled
    if knobs.get("min_p") == "absolute":
        steps["min_p"] = min_p_absolute
    return steps


def chain(requested: Sequence[str], knobs: Mapping[str, Any]) -> list[str]:
    """The order the deviated sampler runs its steps in."""
    out = list(sampler.DOCUMENTED_CHAIN if knobs.get("chain_ignored") else requested)
    if knobs.get("temperature") and "temperature" in out:
        out.remove("temperature")
        at = 0 if knobs["temperature"] == "first" else out.index("penalties") + 1 if "penalties" in out else 0
        out.insert(at, "temperature")
    if knobs.get("min_p_before_top_p") and {"top_p", "min_p"} <= set(out):
        i, j = out.index("top_p"), out.index("min_p")
        if i < j:
            out[i], out[j] = out[j], out[i]
    return out


def sample(logits: Any, params: Mapping[str, Any], r: float, knobs: Mapping[str, Any]) -> dict[str, Any]:
    """``oracle.sampler.sample`` with the deviations ``knobs`` applied (same result shape)."""
    p = sampler.resolve_params(params)
    x = np.asarray(logits, dtype=np.float64)
    steps_of = _steps(knobs)
    is_greedy = p["temperature"] < sampler.GREEDY_TEMPERATURE
    order = chain(p["chain"], knobs)
    order = [s for s in order if s == "penalties"] if is_greedy else order
    steps = []
    for name in order:
        x = steps_of[name](x, p)
        ids, probs = sampler.candidates(x)
        steps.append({"step": name, "ids": ids, "probs": probs})
    if is_greedy:
        token = sampler.greedy(x)
        steps.append({"step": "greedy", "ids": [token], "probs": [1.0]})
        return {"chain": [*order, "greedy"], "steps": steps, "ids": [token], "probs": [1.0], "token": token}
    ids, probs = sampler.candidates(x)
    return {"chain": order, "steps": steps, "ids": ids, "probs": probs, "token": sampler.draw(ids, probs, r)}


# ---------------------------------------------------------------------------
# answers, compared as the gate compares them


def _same_set(
    a_ids: Sequence[int], a_probs: Sequence[float], b_ids: Sequence[int], b_probs: Sequence[float]
) -> bool:
    a = dict(zip(map(int, a_ids), map(float, a_probs), strict=True))
    b = dict(zip(map(int, b_ids), map(float, b_probs), strict=True))
    return a.keys() == b.keys() and all(abs(a[i] - b[i]) <= PROB_TOL for i in a)


@dataclass(eq=False)
class SampleAnswer:
    """A sampler result and its r; equal to another when the sample gate could not tell
    them apart."""

    result: Mapping[str, Any]
    r: float

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SampleAnswer):
            return NotImplemented
        try:
            a, b = self.result, other.result
            if [s["step"] for s in a["steps"]] != [s["step"] for s in b["steps"]]:
                return False
            pairs = [*zip(a["steps"], b["steps"], strict=True), (a, b)]
            if not all(_same_set(x["ids"], x["probs"], y["ids"], y["probs"]) for x, y in pairs):
                return False
            if a.get("token") is None or b.get("token") is None or a["token"] == b["token"]:
                return True
            return len(a["ids"]) > 1 and expected_draw(a["ids"], a["probs"], self.r)[1] <= DRAW_MARGIN
        except (KeyError, TypeError, ValueError):  # a malformed answer equals nothing
            return False

    __hash__ = None  # type: ignore[assignment]


def answer(stage: str, m: Any, inp: Mapping[str, Any], knobs: Mapping[str, Any]) -> SampleAnswer:
    """The oracle's sampler result on ``inp`` with the deviations ``knobs`` applied, run on
    the case's finite logits only (a case lists a few dozen of a whole vocabulary's; the
    rest are -inf, which no step revives): the same result, ~1000× less sorting."""
    spec, params = inp["logits"], dict(inp["params"])
    ids = sorted(int(i) for i in spec["ids"])  # ascending: first-index and id-order rules hold
    value = dict(zip(map(int, spec["ids"]), spec["values"], strict=True))
    index = {token: k for k, token in enumerate(ids)}
    last_n = params.get("penalty_last_n", sampler.DEFAULTS["penalty_last_n"])
    window = list(params.get("window", []))[-last_n:] if last_n > 0 else []
    params["window"] = [index[t] for t in window if t in index]  # a -inf token stays -inf
    x = np.asarray([value[t] for t in ids], dtype=np.float32)
    result = sample(x, params, inp["r"], knobs)
    back = lambda ks: [ids[k] for k in ks]  # noqa: E731
    result["steps"] = [{**s, "ids": back(s["ids"])} for s in result["steps"]]
    result["ids"], result["token"] = back(result["ids"]), ids[result["token"]]
    return SampleAnswer(result, inp["r"])


def applies(stage: str, m: Any, inp: Mapping[str, Any], knobs: Mapping[str, Any]) -> bool:
    """Every sampler deviation can show on any case (one that cannot gives the reference's answer)."""
    return True


# ---------------------------------------------------------------------------
# the catalogue

CATALOGUE: tuple[Hypothesis, ...] = (
    *_h(
        "top_p_reaching", "sample",
        "stops top-p when the cumulative probability reaches p (≥): the token that crosses p is dropped "
        "where a prefix sums to exactly p (the documented step keeps it: cumulative > p)",
        top_p_reaching=True,
    ),
    *_h(
        "temperature_first", "sample",
        "applies the temperature first, before the penalties and the filters; it is the chain's last step",
        temperature="first",
    ),
    *_h(
        "temperature_before_filters", "sample",
        "applies the temperature after the penalties but before top-k/top-p/min-p; it is the chain's last step",
        temperature="before_filters",
    ),
    *_h(
        "min_p_before_top_p", "sample",
        "runs min-p before top-p; top-p comes first (penalties, top-k, top-p, min-p, temperature)",
        min_p_before_top_p=True,
    ),
    *_h(
        "chain_ignored", "sample",
        "ignores the requested step order (params chain) and always runs the documented chain",
        chain_ignored=True,
    ),
    *_h(
        "min_p_scaled", "sample",
        "measures min-p on the temperature-scaled probabilities; min-p is relative to the top "
        "probability before the temperature",
        min_p="scaled",
    ),
    *_h(
        "min_p_absolute", "sample",
        "applies min-p as an absolute probability floor (p ≥ min_p); min-p is relative to the top "
        "probability (p ≥ min_p × p_max)",
        min_p="absolute",
    ),
)  # fmt: skip


def reference(model: Any) -> None:
    """The sampler needs no model: a case carries its logits."""
    return None


def case_input(record: Any) -> dict[str, Any] | None:
    """A sample record's input, from the snapshot it was gated on."""
    from specgate.upkeep.recorded_cases import recorded_case

    case = recorded_case(record, "sample")  # under the snapshot root the record carries
    if not isinstance(case, Mapping) or "logits" not in case:
        return None
    return {"logits": case["logits"], "params": case["params"], "r": case["r"]}


def ask(engine: Any, stage: str, model: Any, inp: Mapping[str, Any]) -> SampleAnswer:
    """The engine's sampler result on ``inp`` (an exception where it refuses)."""
    from specgate.outcomes.gate import call

    return SampleAnswer(call(engine, "sample", logits_of(inp), inp["params"], inp["r"]), inp["r"])
