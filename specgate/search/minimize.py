"""After hypothesis: triage's delta debugging (``specgate.triage.shrink``) on the
smallest input hypothesis found, keeping only variants that still diverge from
the oracle with the same signature; sampler inputs are shrunk over their logit
entries and penalty window the same way."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from specgate import triage


def minimize(
    stage: Any,
    model: Any,
    inp: dict[str, Any],
    signature: str,
    engine: Any,
    oracle: Any,
    budget: float,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[dict[str, Any], int]:
    """The smallest variant of ``inp`` found within ``budget`` seconds, and the checks run."""
    deadline = clock() + budget
    seen: dict[str, bool] = {}

    def diverges(candidate: dict[str, Any]) -> bool:
        key = repr(sorted(candidate.items(), key=lambda kv: kv[0]))
        if key not in seen:
            if clock() > deadline:
                raise triage.OutOfTime
            try:
                verdict = triage.recheck(stage.gate_stage, engine, oracle, model, candidate)
            except Exception:  # the oracle cannot take this variant: not a smaller reproducer
                seen[key] = False
                return False
            seen[key] = verdict.outcome in ("fail", "error") and (
                triage.signature(stage.gate_stage, verdict.outcome, verdict.message) == signature
            )
        return seen[key]

    small = _shrink_sample(inp, diverges) if "logits" in inp else triage.shrink(inp, diverges)
    return small, len(seen)


def _shrink_sample(inp: dict[str, Any], diverges: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    def with_entries(entries: list[tuple[int, float]]) -> dict[str, Any]:
        logits = {**inp["logits"], "ids": [i for i, _ in entries], "values": [v for _, v in entries]}
        return {**inp, "logits": logits}

    entries = list(zip(inp["logits"]["ids"], inp["logits"]["values"], strict=True))
    small = with_entries(triage.ddmin(entries, lambda e: diverges(with_entries(e))))
    window = small["params"].get("window", [])
    if window:

        def with_window(w: list[int]) -> dict[str, Any]:
            return {**small, "params": {**small["params"], "window": w}}

        try:
            if diverges(with_window([])):
                return with_window([])
        except triage.OutOfTime:
            return small
        small = with_window(triage.ddmin(window, lambda w: diverges(with_window(w))))
    return small
