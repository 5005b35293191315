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

A cause that is only *localized* (``specgate.diagnose.localize``: no catalogue entry, a
parity report's group heading such as "special-token scan: a control token's text is cut
out as its own segment in plain mode") is taken as given by excluding its cases
(``GivenCauses``, ``--given-cause``): each split or encode divergence the search meets is
localized against the oracle's tokenizer from the engine's answer it already has, and
one whose cause (``localize.cause_of``) is given is counted as explained — never a
finding, never one of a signature's capped variants — so the search goes on looking for
what that cause does not explain. Localization names the first step the engine departs
at, so an input showing the given cause *and* another bug there counts as explained; the
other bug is found on its inputs without the given one. ``from_report`` reads both kinds
from a parity report's JSON (``--given-from``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from impl.oracle import OracleEngine
from specgate.diagnose import tokenizer as catalogue

#: The stages whose known deviations can be taken as given (the tokenizer catalogue's).
GIVEN_STAGES = ("split", "encode", "decode")
#: The stages whose localized causes can be taken as given (``localize``: split and encode).
CAUSE_STAGES = ("split", "encode")
#: Where a user finds the causes ``--given-cause`` takes (its usage error says it).
WHERE_CAUSES_ARE = (
    "a localized cause is a parity report's group heading (its JSON group's \"cause\"), e.g. "
    '"special-token scan: a control token\'s text is cut out as its own segment in plain mode"; '
    'a diagnosed one ("the engine normalizes …") is given by its name: --given NAME'
)


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


def given_cause(text: str) -> str:
    """The localized cause ``text`` names: a cause as a report heads its group, or a whole
    ``Localized:`` line of a report (its cause, without the case's text);
    ``UnknownGiven`` (one line, saying where causes are found) for anything else."""
    from specgate.diagnose.localize import cause_of, is_cause

    line = " ".join(str(text).split())
    if is_cause(line):
        return line
    if cause := cause_of(line):
        return cause
    shown = repr(line[:80] + ("…" if len(line) > 80 else ""))
    raise UnknownGiven(f"--given-cause {shown}: not a localized cause; {WHERE_CAUSES_ARE}")


class GivenCauses:
    """Localized causes taken as given: ``explains`` says which given cause a split or
    encode divergence is localized to (from the engine's answer in its verdict, against
    the oracle's tokenizer of the model: no engine call), ``""`` when none."""

    def __init__(self, causes: Sequence[str]) -> None:
        self.causes = list(dict.fromkeys(given_cause(c) for c in causes))
        self._tokenizers: dict[str, Any] = {}

    def _tokenizer(self, model: Any) -> Any:
        key = str(model.gguf)
        if key not in self._tokenizers:
            from oracle.tokenizer import Tokenizer

            self._tokenizers[key] = Tokenizer.from_gguf(model.gguf)
        return self._tokenizers[key]

    def explains(self, stage: str, model: Any, inp: dict[str, Any], verdict: Any) -> str:
        """The given cause a failing ``verdict`` of ``stage`` on ``inp`` localizes to, or ``""``."""
        from specgate.diagnose.localize import cause_of, localize_encode, localize_split

        got = verdict.engine_answer
        if stage not in CAUSE_STAGES or verdict.outcome != "fail" or not isinstance(got, list):
            return ""
        try:
            tok = self._tokenizer(model)
            if stage == "split":
                line = localize_split(tok, inp["text"], got)
            else:
                line = localize_encode(tok, inp["text"], inp["parse_special"], got)
        except Exception:  # an answer the localization cannot read: not explained
            return ""
        cause = cause_of(line)
        return cause if cause in self.causes else ""


def from_report(path: Path) -> tuple[list[str], list[str], list[str]]:
    """The known deviations of a parity report's JSON (``--given-from``): the catalogue
    names of its diagnosed tokenizer groups, the localized causes of its other failing
    groups (their ``cause``, or the cause of their ``localized`` line), and a note per
    group that gives neither (another stage's diagnosis). ``UnknownGiven`` (one line) for a
    file that is no parity report or names no cause."""
    from specgate.diagnose.localize import cause_of
    from specgate.reports.diff import MAX_REPORT_BYTES
    from specgate.safe_io import files

    try:  # a regular file within the reports' bound, as ``specgate report diff`` reads one
        data = files.read_json(Path(path), MAX_REPORT_BYTES, "report")
    except files.UnsafeFile as exc:
        raise UnknownGiven(f"--given-from: {str(exc).splitlines()[0][:500]}") from None
    groups = data.get("groups") if isinstance(data, dict) else None
    if not isinstance(groups, list):
        raise UnknownGiven(f'--given-from {path}: not a parity report\'s JSON (no "groups" list)')
    by_cause = {h.cause: h.name for h in catalogue.CATALOGUE}
    names: list[str] = []
    causes: list[str] = []
    notes: list[str] = []
    for group in groups:
        if not isinstance(group, dict) or group.get("outcome", "fail") != "fail":
            continue
        diagnosis = str(group.get("diagnosis") or "")
        if diagnosis:  # "A; and it B", maybe " — or, equally (…), it C": the first reading's names
            parts = diagnosis.split(" — or, equally")[0].split("; and it ")
            if all(p in by_cause for p in parts):
                names += [by_cause[p] for p in parts if by_cause[p] not in names]
            else:
                notes.append(f"not a tokenizer deviation, not taken as given: the engine {diagnosis}")
            continue
        cause = str(group.get("cause") or "") or cause_of(str(group.get("localized") or ""))
        if cause and cause not in causes:
            causes.append(cause)
    if not names and not causes:
        raise UnknownGiven(
            f"--given-from {path}: none of its {len(groups)} group(s) is a diagnosed tokenizer "
            "deviation or a localized cause"
        )
    return names, causes, notes
