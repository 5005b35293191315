"""How the generate stage's cases are built from the references (``Stage.build``):
each prompt's greedy streams of the references (``reference_stream``: ids, finish
reason, each step's top-2 margin) as one ``greedy/<prompt>`` case, the prefix they
agree on (``agreed_prefix``; a parting above the tie tolerance is a recorded
disagreement), and on that prefix stop-string cases whose known answers follow from
the documented rules (``stop-<kind>/<prompt>``: a stop straddling a token boundary, a
stop after a character split over two tokens). The streams are arguments: the recorder
(``tests/references/test_generate.py``) runs the references one at a time."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from specgate.checks import generate as generate_checks
from specgate.outcomes.gate import first_difference, first_divergence


def reference_stream(result: dict[str, Any]) -> dict[str, Any]:
    """A reference's greedy generation as recorded: ids, finish reason, top-2 margins."""
    return {
        "ids": result["ids"],
        "finish_reason": result["finish_reason"],
        "margins": generate_checks.margins(result["steps"]),
    }


def agreed_prefix(streams: dict[str, dict[str, Any]], tolerance: float) -> tuple[list[int], str | None]:
    """The ids all references agree on, and why they part (None when identical)."""
    (a_name, a), *others = streams.items()
    ids = list(a["ids"])
    reason = None
    for b_name, b in others:
        n = first_difference(ids, b["ids"])
        n = len(ids) if n is None else n
        if n < len(ids) or n < len(b["ids"]) or a["finish_reason"] != b["finish_reason"]:
            margin = min(
                a["margins"][n] if n < len(a["margins"]) else float("inf"),
                b["margins"][n] if n < len(b["margins"]) else float("inf"),
            )
            if margin > tolerance:
                reason = (
                    f"{a_name} and {b_name} greedy streams part at step {n} with top-2 margin {margin:.4f} "
                    f"> tie tolerance {tolerance}:\n"
                    + first_divergence(generate_checks.stream(a), generate_checks.stream(b))
                )
        ids = ids[:n]
    return ids, reason


def straddle_stop(pieces: list[bytes]) -> bytes | None:
    """4 ASCII bytes around the first token boundary with 2 ASCII bytes each side."""
    for left, right in itertools.pairwise(pieces):
        around = left[-2:] + right[:2]
        if len(left) >= 2 and len(right) >= 2 and all(0x20 <= b < 0x7F for b in around):
            return around
    return None


def stop_after_split_character(pieces: list[bytes]) -> bytes | None:
    """A stop string after a valid character whose bytes span two tokens: the first
    whole character after it that does not occur earlier in the stream and does not
    start with the same byte (a stop-string prefix would be held back anyway and
    hide a holdback that splits the character)."""
    data, offset = b"".join(pieces), 0
    for piece in pieces[:-1]:
        offset += len(piece)
        if offset >= len(data) or data[offset] & 0xC0 != 0x80:  # the next token starts a new character
            continue
        lead = offset - 1
        while lead > 0 and data[lead] & 0xC0 == 0x80:
            lead -= 1
        end = next((lead + n for n in (2, 3, 4) if lead + n > offset and _whole(data[lead : lead + n])), None)
        if end is None:
            continue
        start = end
        while start < len(data):  # a valid character whose bytes straddle this token boundary was found
            char = next(
                (data[start : start + n] for n in (1, 2, 3, 4) if _whole(data[start : start + n])), None
            )
            if char is None:
                start += 1
                continue
            if char[0] != data[lead] and data.find(char) == start:
                return char
            start += len(char)
        return None
    return None


def _whole(chunk: bytes) -> bool:
    try:
        chunk.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


#: The stop-string kinds of ``corpus/stops/generate.toml``'s ``[stops] kinds``, by their finder.
STOP_FINDERS: dict[str, Callable[[list[bytes]], bytes | None]] = {
    "straddle": straddle_stop,
    "after-split-character": stop_after_split_character,
}


def stop_case(
    prompt_ids: list[int], pieces: list[bytes], stop: bytes, margins: list[float], greedy: dict[str, Any]
) -> dict[str, Any]:
    """Known answer: the stream cut where the stop string first starts; the ids up to
    the token that completes it (``reference.ids`` is filled in by the caller)."""
    data = b"".join(pieces)
    cut = data.find(stop)
    n_ids, total = 0, 0
    while total < cut + len(stop):
        total += len(pieces[n_ids])
        n_ids += 1
    return {
        "prompt": prompt_ids,
        "params": {**greedy, "max_tokens": n_ids, "stop": [stop.decode("utf-8")]},
        "expected": {"bytes": data[:cut].hex(), "finish_reason": "stop_string", "n_ids": n_ids},
        "reference": {"ids": None, "margins": margins[:n_ids]},
    }


def generate_cases(
    prompts: dict[str, list[int]],
    by_reference: dict[str, dict[str, dict[str, Any]]],
    detokenize: Callable[[list[int]], bytes],
    greedy: dict[str, Any],
    tolerance: float,
    kinds: list[str],
) -> dict[str, Any]:
    """The generate cases of every prompt (name -> prompt ids) from each reference's
    recorded streams (``by_reference``: reference name -> prompt name ->
    ``reference_stream``); ``detokenize`` gives a token list's bytes (llama.cpp's),
    ``tolerance`` is the stage's tie tolerance, ``kinds`` the stop-string kinds."""
    cases: dict[str, Any] = {}
    for name, ids in prompts.items():
        streams = {reference_name: streams[name] for reference_name, streams in by_reference.items()}
        agreed, reason = agreed_prefix(streams, tolerance)
        case: dict[str, Any] = {"prompt": ids, "params": greedy, "references": streams}
        if reason:
            case["disagreement"] = reason
        cases[f"greedy/{name}"] = case

        pieces = [detokenize([t]) for t in agreed]
        margins = [min(s["margins"][k] for s in streams.values()) for k in range(len(agreed))]
        for kind in kinds:
            stop = STOP_FINDERS[kind](pieces)
            if stop is not None:
                stop_ = stop_case(ids, pieces, stop, margins, greedy)
                stop_["reference"]["ids"] = agreed[: stop_["expected"]["n_ids"]]
                cases[f"stop-{kind}/{name}"] = stop_
    return cases
