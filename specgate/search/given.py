"""A known deviation taken as given (``specgate search --given``): the search looks for
the divergences it does not explain.

An engine with one frequent bug masks a rare one: every failing input shows the frequent
bug's signature, the variants a signature keeps are capped, and the rare bug's inputs
are never looked at. Given the frequent bug's name in the tokenizer catalogue
(``specgate.diagnose.tokenizer``: ``nfc``, ``whitespace_run_whole``, ``specials_in_plain_text``
…, the names a parity report's diagnosis gives), the search's reference becomes the oracle
*with that deviation* (``GivenOracle``): inputs the known bug alone explains pass, and
what still diverges is another bug. The references confirm findings against the spec'd
oracle as always, so a reported divergence is a real one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from impl.oracle import OracleEngine
from specgate.diagnose import tokenizer as catalogue

#: The stages whose known deviations can be taken as given (the tokenizer catalogue's).
GIVEN_STAGES = ("split", "encode", "decode")


class UnknownGiven(ValueError):
    """A ``--given`` name that is no catalogue deviation (one line, naming the known ones)."""


def names() -> list[str]:
    """The deviations ``--given`` accepts."""
    return sorted({h.name for h in catalogue.CATALOGUE})


def knobs_of(given: Sequence[str]) -> dict[str, Any]:
    """The oracle's knob settings of the named deviations (they compose, as the diagnosis'
    pairs do); ``UnknownGiven`` for a name the catalogue does not hold."""
    known = {h.name: h for h in catalogue.CATALOGUE}
    unknown = [n for n in given if n not in known]
    if unknown:
        raise UnknownGiven(
            f"--given {', '.join(unknown)}: not a known deviation; known: {', '.join(names())}"
        )
    knobs: dict[str, Any] = {}
    for name in given:
        knobs.update(dict(known[name].knobs))
    return knobs


class GivenOracle(OracleEngine):
    """The oracle with known deviations applied to its tokenizer: the search's reference
    when deviations are given. Every other stage is the oracle's own."""

    name = "oracle"

    def __init__(self, given: Sequence[str]) -> None:
        super().__init__()
        self.given = list(given)
        self.knobs = knobs_of(given)
        self._models: dict[str, catalogue.ModelTokenizer] = {}

    def _deviated(self, model: Any) -> catalogue.ModelTokenizer:
        key = str(model.gguf)
        if key not in self._models:
            self._models[key] = catalogue.model_tokenizer(model.gguf)
        return self._models[key]

    def _answer(self, stage: str, model: Any, inp: dict[str, Any]) -> Any:
        m = self._deviated(model)
        if not catalogue.applies(stage, m, inp, self.knobs):
            return catalogue.answer(stage, m, inp, {})
        return catalogue.answer(stage, m, inp, self.knobs)

    def split(self, model: Any, text: str) -> list[str]:
        return self._answer("split", model, {"text": text})

    def encode(self, model: Any, text: str, parse_special: bool) -> list[int]:
        return self._answer("encode", model, {"text": text, "parse_special": parse_special})

    def decode(self, model: Any, ids: Sequence[int]) -> bytes:
        return self._answer("decode", model, {"ids": list(ids)})
