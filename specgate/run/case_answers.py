"""The engine's own answer of a case that did not pass, kept in a bounded form.

A gate hands its engine answer to ``keep`` (it lives on the test item's stash, never in
the JUnit properties); when the case fails, is refused or errors, the plugin asks
``record`` for the case's bounded answers, stored in its record (``GateRecord.answers``)
and so in the JSON report and the case browser:

* ``engine`` and ``reference`` — both answers windowed around the first divergence
  (``WINDOW_ITEMS`` tokens or pieces on each side, one a line; ``WINDOW_CHARS``
  characters on each side of a text), with markers saying how much was left out,
  invisible and combining code points escaped, each cut to ``SHOWN_CHARS``;
* ``diff`` — a line diff of the two windows (``-`` reference, ``+`` engine) with
  whitespace made visible;
* ``where`` — where the first divergence falls (``specgate.run.divergence_site``), and
  ``site``, its coarser part that joins an undiagnosed group's signature
  (``specgate.run.signatures``).

A record therefore grows with its number of cases, never with what an engine said:
a 20 MB answer is a few kilobytes here.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from impl.bounds import BOUNDS, cut
from specgate.outcomes.gate import first_difference, visible
from specgate.run.divergence_site import site
from specgate.safe_io.text_safety import escaped

#: The most characters of one kept answer (engine, reference or diff).
SHOWN_CHARS = 2000
#: Tokens or pieces kept on each side of the first divergence.
WINDOW_ITEMS = 8
#: Characters of a text kept on each side of the first divergence.
WINDOW_CHARS = 300
#: The outcomes whose answers are kept.
KEPT_OUTCOMES = ("fail", "refused", "error")

ANSWER = pytest.StashKey[Any]()
_PIECES = pytest.StashKey[dict[str, Callable[[int], bytes]]]()
#: Models whose token pieces a session keeps (one oracle vocabulary each).
_MOST_MODELS = 8


def keep(request: pytest.FixtureRequest, answer: Any) -> None:
    """The gate's engine answer for this case (read only if the case does not pass)."""
    request.node.stash[ANSWER] = answer


def _window_items(items: Sequence[Any], i: int, show: Callable[[Any], str]) -> str:
    lo, hi = max(0, i - WINDOW_ITEMS), min(len(items), i + WINDOW_ITEMS + 1)
    lines = [f"… {lo} before"] if lo else []
    for k in range(lo, hi):
        lines.append(("▶ " if k == i else "  ") + cut(escaped(show(items[k]), False), BOUNDS.diff_line_chars))
    if i >= len(items):
        lines.append("▶ (end)")
    if hi < len(items):
        lines.append(f"… {len(items) - hi} after")
    return "\n".join(lines)


def _window_text(text: str, i: int) -> str:
    lo, hi = max(0, i - WINDOW_CHARS), min(len(text), i + WINDOW_CHARS)
    head = f"… [{lo:,} characters before] …" if lo else ""
    tail = f"… [{len(text) - hi:,} characters after] …" if hi < len(text) else ""
    return head + escaped(text[lo:hi]) + tail


def _diff(reference: str, engine: str) -> str:
    lines = lambda t: [line + "\n" for line in visible(t).split("\n")]  # noqa: E731
    return "".join(difflib.unified_diff(lines(reference), lines(engine), "reference", "engine", n=2))


def _pieces_of(config: pytest.Config, model: Any) -> Callable[[int], bytes] | None:
    """A token id as the bytes it stands for (the oracle's table), one per model and session."""
    cache = config.stash.setdefault(_PIECES, {})
    if model.id not in cache:
        from impl.oracle import OracleEngine

        try:
            oracle = OracleEngine()
            oracle.decode(model, [])
        except Exception:  # a model the oracle cannot read: no pieces
            return None
        if len(cache) >= _MOST_MODELS:
            cache.pop(next(iter(cache)))
        cache[model.id] = lambda i, o=oracle, m=model: o.decode(m, [i])
    return cache[model.id]


def answers(
    stage: str, case: dict[str, Any], got: Any, pieces: Callable[[int], bytes] | None = None
) -> dict[str, str] | None:
    """The bounded answers of one case (see the module docstring), or None for a
    stage or case shape without a comparable reference answer."""
    stage = stage.split("/")[0]
    if stage in ("split", "encode") and isinstance(got, (list, tuple)):
        ref = list(case["pieces" if stage == "split" else "ids"])
        eng = list(got)
        i = first_difference(ref, eng)
        i = 0 if i is None else i  # equal (a reference shown alone): from the start
        if stage == "split":
            show = lambda p: json.dumps(p, ensure_ascii=False)  # noqa: E731
        else:
            show = (lambda t: f"{t} = {pieces(t)!r}" if isinstance(t, int) else repr(t)) if pieces else repr
        reference, engine = _window_items(ref, i, show), _window_items(eng, i, show)
        key, where = site(stage, case["text"], ref, eng, pieces)
    elif stage == "decode" and isinstance(got, (bytes, bytearray, list)):
        ref_b, eng_b = bytes.fromhex(case["hex"]), bytes(got)
        i = first_difference(ref_b, eng_b)
        i = 0 if i is None else i
        ref_t, eng_t = (b.decode("utf-8", "backslashreplace") for b in (ref_b, eng_b))
        at = len(ref_b[:i].decode("utf-8", "backslashreplace"))
        reference, engine = _window_text(ref_t, at), _window_text(eng_t, at)
        key, where = site(stage, ref_t, None, None, None, at)
    elif stage == "render" and (isinstance(got, str) or got is None):
        ref_t = case.get("prompt", case.get("output"))
        if not isinstance(ref_t, str):
            ref_t = json.dumps(case.get("error"), ensure_ascii=False)
        eng_t = got if isinstance(got, str) else "(the engine refused)"
        i = first_difference(ref_t, eng_t)
        i = 0 if i is None else i
        reference, engine = _window_text(ref_t, i), _window_text(eng_t, i)
        key, where = site(stage, ref_t, None, None, None, i)
    else:
        return None
    return {
        "engine": cut(engine, SHOWN_CHARS),
        "reference": cut(reference, SHOWN_CHARS),
        "diff": cut(_diff(reference, engine), SHOWN_CHARS),
        "where": where,
        "site": key,
    }


def _reference_answer(stage: str, case: dict[str, Any]) -> Any:
    """The reference's answer in the shape of an engine's (to show it alone)."""
    base = stage.split("/")[0]
    if base == "decode":
        return bytes.fromhex(case["hex"])
    if base == "render":
        return case.get("prompt", case.get("output"))
    return case.get("pieces" if base == "split" else "ids")


def record(item: pytest.Item, stage: str, outcome: str) -> dict[str, str]:
    """What a case's record keeps of its answers: the bounded answers of a failing
    case; a refused or errored case's reference answer (the engine answered with the
    message); nothing for the other outcomes, or when the gate kept no answer."""
    if outcome not in KEPT_OUTCOMES:
        return {}
    case = getattr(item, "funcargs", {}).get("case")
    if not isinstance(case, dict):
        return {}
    got = item.stash.get(ANSWER, None) if outcome == "fail" else None
    model = getattr(item, "funcargs", {}).get("model")
    try:
        pieces = _pieces_of(item.config, model) if stage == "encode" and model is not None else None
        kept = answers(stage, case, got, pieces) if got is not None else None
        if kept is None and outcome != "fail":
            shown = answers(stage, case, _reference_answer(stage, case), pieces)
            kept = {"reference": shown["reference"]} if shown else None
    except (KeyError, TypeError, ValueError, UnicodeError):
        return {}  # a case of another shape: the record keeps its message only
    if kept is None:
        return {}
    if outcome != "fail":
        kept["engine"] = f"({outcome}: its answer is the message)"
    return kept
