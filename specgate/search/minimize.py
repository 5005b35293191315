"""After hypothesis: triage's delta debugging (``specgate.run.triage.shrink``) on the
smallest input hypothesis found, keeping only variants that still diverge from
the oracle with the same signature; sampler inputs are shrunk over their logit
entries and penalty window the same way, generate inputs over their stop strings,
the characters of each, and ``max_tokens``."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

from specgate.run import triage


def minimize(
    stage: Any,
    model: Any,
    inp: dict[str, Any],
    signature: str,
    engine: Any,
    oracle: Any,
    budget: float,
    clock: Callable[[], float] = time.monotonic,
    explained: Callable[[dict[str, Any], Any], str] | None = None,
) -> tuple[dict[str, Any], int]:
    """The smallest variant of ``inp`` found within ``budget`` seconds, and the checks run.
    ``explained`` (the input and its verdict → a given cause, ``search.given.GivenCauses``):
    a variant a given cause explains is no smaller reproducer of another bug."""
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
            seen[key] = (
                verdict.outcome in ("fail", "error")
                and triage.signature(stage.gate_stage, verdict.outcome, verdict.message) == signature
                and not (explained is not None and explained(candidate, verdict))
            )
        return seen[key]

    small = inp
    try:
        if "logits" in inp:
            small = _shrink_sample(inp, diverges)
        elif "prompt" in inp:
            small = _shrink_generate(inp, diverges)
        else:
            small = _shrink_structure(inp, diverges)
            small = triage.shrink(small, diverges)
    except triage.OutOfTime:
        pass  # the smallest input found so far stands
    return small, len(seen)


_CONSTRUCT_BOUNDARY = re.compile(r"(?<=[}])\|(?=[{])")


def _shrink_structure(inp: dict[str, Any], diverges: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """Before triage's character-level pass: whole constructs of a template (the
    generator joins them with ``|``), context variables and the characters of their
    strings; a render input's keyword arguments (tools, documents) and their elements."""
    small = dict(inp)
    if "template" in small:
        parts = _CONSTRUCT_BOUNDARY.split(small["template"])
        kept = triage.ddmin(parts, lambda ps: diverges({**small, "template": "|".join(ps)}))
        small["template"] = "|".join(kept)
        small["context"] = _shrink_mapping(small, "context", diverges)
    elif "messages" in small:
        if small.get("kwargs"):
            small["kwargs"] = _shrink_mapping(small, "kwargs", diverges)
        small["messages"] = triage.ddmin(small["messages"], lambda ms: diverges({**small, "messages": ms}))
        for i, message in enumerate(small["messages"]):
            if isinstance(message, dict):
                small["messages"] = _shrink_message_fields(small, i, diverges)
    return small


def _shrink_message_fields(
    inp: dict[str, Any], i: int, diverges: Callable[[dict[str, Any]], bool]
) -> list[Any]:
    """Message ``i`` without the fields it does not need (``role`` stays; ``content`` is
    triage's), and with the characters of its other string fields (reasoning) shrunk."""
    messages = inp["messages"]

    def with_message(message: dict[str, Any]) -> dict[str, Any]:
        return {**inp, "messages": [*messages[:i], message, *messages[i + 1 :]]}

    message = dict(messages[i])
    for field in [f for f in message if f not in ("role", "content")]:
        without = {k: v for k, v in message.items() if k != field}
        if diverges(with_message(without)):
            message = without
        elif isinstance(message[field], str) and message[field]:
            base = message
            chars = triage.ddmin(
                list(base[field]), lambda cs, f=field, b=base: diverges(with_message({**b, f: "".join(cs)}))
            )
            message = {**base, field: "".join(chars)}
    return with_message(message)["messages"]


def _shrink_mapping(
    inp: dict[str, Any], key: str, diverges: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    """``inp[key]`` (a mapping) with as few entries, list elements and characters as still diverge."""
    mapping = inp[key]
    if diverges({**inp, key: {}}):  # ddmin never tries the empty list
        return {}
    names = triage.ddmin(list(mapping), lambda ks: diverges({**inp, key: {k: mapping[k] for k in ks}}))
    current = {k: mapping[k] for k in names}
    for name in names:
        value = current[name]

        def with_value(v: Any, name: str = name, base: dict[str, Any] = current) -> dict[str, Any]:
            return {**inp, key: {**base, name: v}}

        if isinstance(value, list) and len(value) > 1:
            value = triage.ddmin(value, lambda vs: diverges(with_value(vs)))
        elif isinstance(value, str) and value:
            value = "".join(triage.ddmin(list(value), lambda cs: diverges(with_value("".join(cs)))))
            if diverges(with_value("")):
                value = ""
        current = {**current, name: value}
    return current


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


def _shrink_generate(inp: dict[str, Any], diverges: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """Fewer stop strings, shorter stop strings (ddmin over their characters), then the
    fewest ``max_tokens`` that still diverge (the prompt is a corpus prompt: kept)."""

    def with_params(**changes: Any) -> dict[str, Any]:
        return {**inp, "params": {**inp["params"], **changes}}

    stops = list(inp["params"].get("stop", []))
    if stops and not diverges(with_params(stop=[])):
        stops = triage.ddmin(stops, lambda ss: diverges(with_params(stop=ss)))
    else:
        stops = []
    for i in range(len(stops)):
        chars = triage.ddmin(
            list(stops[i]),
            lambda cs, i=i: diverges(with_params(stop=[*stops[:i], "".join(cs), *stops[i + 1 :]])),
        )
        stops[i] = "".join(chars)
    inp = with_params(stop=stops)
    for max_tokens in range(1, inp["params"]["max_tokens"]):
        if diverges(with_params(max_tokens=max_tokens)):
            return with_params(max_tokens=max_tokens)
    return inp
