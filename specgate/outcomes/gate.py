"""Gate outcomes and first-divergence messages.

A gate test calls the engine through ``call`` and compares with a reference. Its
outcome is one of:

* **pass**;
* **fail** — with the first divergence; also a declared stage that leaves out a
  field the gate compares;
* **refused** — the engine declined this input with a stated reason (a structured
  ``unsupported``). Visible in its own column, grouped by message, never a pass;
  ``--strict`` turns it into a failure;
* **n/a** — the engine does not offer the stage or does not claim the conformance
  class (never a pass);
* **reference-disagreement** — the references disagree with each other; recorded
  with the reason, never an engine failure;
* **error** — the engine crashed, hung or answered malformed data; the run goes on.

The run verdict (``specgate.outcomes.verdict``) adds two rules that no single case can see:
a (stage, model) row the engine declares but answers only with refusals and errors
fails, and a run in which no case passed fails.

Each non-pass outcome is raised as a typed exception, so the plugin classifies a
case by its type, never by parsing a message. ``NotApplicable``, ``Refused`` and
``ReferenceDisagreement`` are pytest skips (they do not fail the pytest run on
their own; the verdict rules above do).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import pytest

from impl.bounds import BOUNDS, cut
from impl.ops import accepted
from impl.protocol import Engine, EngineError, ModelRef, Unsupported

OUTCOMES = ("pass", "fail", "refused", "n/a", "reference-disagreement", "error")
#: Short column headings for the matrix, in ``OUTCOMES`` order.
HEADINGS = ("pass", "fail", "refused", "n/a", "disagree", "error")


class NotApplicable(pytest.skip.Exception):
    """Outcome ``n/a``: the stage or class is not offered; nothing was gated."""


class Refused(pytest.skip.Exception):
    """Outcome ``refused``: the engine declined the input with a stated reason."""


class ReferenceDisagreement(pytest.skip.Exception):
    """Outcome ``reference-disagreement``: the references themselves disagree."""


def not_applicable(reason: str) -> NoReturn:
    raise NotApplicable(reason)


def refused(reason: str) -> NoReturn:
    raise Refused(reason)


def reference_disagreement(reason: str) -> NoReturn:
    raise ReferenceDisagreement(reason)


def report_metrics(request: pytest.FixtureRequest, metrics: dict[str, float]) -> None:
    """The measured values beside a case's verdict, pass or fail (the report's metrics
    column: ``specgate.run.outcome`` reads ``metric:`` properties)."""
    request.node.user_properties.extend((f"metric:{name}", value) for name, value in metrics.items())


def claims(engine: Engine, capability: str, conformance_class: str) -> None:
    """``n/a`` when the engine offers ``capability`` but does not claim
    ``conformance_class`` (``Engine.classes``); an engine that does not offer it at
    all is ``n/a`` at its ``call``."""
    if engine.offers(capability) and conformance_class not in engine.classes:
        not_applicable(
            f"{engine.name} does not claim the {conformance_class!r} conformance class "
            f"(it claims {', '.join(sorted(engine.classes)) or 'none'})"
        )


def call(
    engine: Engine,
    capability: str,
    *args: Any,
    method: str | None = None,
    refusal_expected: bool = False,
    **kwargs: Any,
) -> Any:
    """Invoke one stage of the engine under test (``method`` defaults to the
    capability's name; ``render_template`` belongs to the ``render`` capability).

    A capability the engine does not declare is ``n/a``. An input it refuses with
    ``Unsupported`` is ``refused`` — unless the gate checks refusals itself
    (``refusal_expected``: a template the reference refuses must be refused), then
    ``Unsupported`` propagates to the gate. Any other exception becomes
    ``EngineError`` (outcome ``error``) naming the stage, so a crashing engine never
    aborts the run and never passes for a refusal. An argument the engine may ignore
    (``impl.ops.accepted``: ``logits``' ``positions``) is not passed to a method without it.
    """
    if not engine.offers(capability):
        not_applicable(f"{engine.name} does not offer {capability!r}")
    for model in (a for a in args if isinstance(a, ModelRef)):  # a model its handshake leaves out
        if why := getattr(engine, "unsupported_model", lambda m: "")(model):
            not_applicable(why)
    try:
        target = getattr(engine, method or capability)
        return target(*args, **accepted(method or capability, target, kwargs))
    except Unsupported as exc:
        if refusal_expected:
            raise
        refused(f"{getattr(engine, 'label', engine.name)} refuses this {capability} input: {exc}")
    except EngineError:
        raise
    except Exception as exc:  # the engine's own bug, surfaced as an error outcome
        raise EngineError(f"{engine.name}.{capability} raised {type(exc).__name__}: {exc}") from exc


def first_difference(expected: Sequence[Any], got: Sequence[Any]) -> int | None:
    """Index of the first position where two sequences differ, or None when they
    are equal. When one is a proper prefix of the other, they differ at the end of
    the shorter one: ``first_difference("ab", "abc") == 2``."""
    for k, (a, b) in enumerate(zip(expected, got, strict=False)):
        if a != b:
            return k
    return None if len(expected) == len(got) else min(len(expected), len(got))


def first_divergence(
    expected: Sequence[Any],
    got: Sequence[Any],
    show: Callable[[Any], str] = repr,
    context: int = 3,
) -> str | None:
    """None when equal; else where the two sequences first differ, with neighbours
    rendered by ``show`` on both sides (e.g. token id -> its piece)."""
    i = first_difference(list(expected), list(got))
    if i is None:
        return None
    lo = max(0, i - context)

    def window(seq: Sequence[Any]) -> str:
        cells = []
        for k in range(lo, min(len(seq), i + context + 1)):
            cell = f"{seq[k]!r}={show(seq[k])}" if show is not repr else repr(seq[k])
            cell = cut(cell, BOUNDS.diff_line_chars)  # one cell of an engine's answer: bounded
            cells.append(f"[{cell}]" if k == i else cell)
        return " ".join(cells) or "(end)"

    return (
        f"first divergence at index {i} (reference length {len(expected)}, engine length {len(got)})\n"
        f"  reference: … {window(expected)} …\n"
        f"  engine:    … {window(got)} …"
    )


def visible(text: str) -> str:
    """Whitespace made visible for diffs of prompts."""
    return text.replace(" ", "·").replace("\t", "→\t").replace("\r", "␍").replace("\n", "↵\n")


def text_diff(expected: str, got: str, names: tuple[str, str] = ("reference", "engine")) -> str | None:
    """None when equal; else the first differing character offset and a line
    diff (``-`` reference, ``+`` engine) with whitespace made visible. Every line
    of the diff ends with a newline, so a one-line text never glues its ``-`` and
    ``+`` lines together."""
    i = first_difference(expected, got)
    if i is None:
        return None

    def lines(text: str) -> list[str]:
        return [line if line.endswith("\n") else line + "\n" for line in visible(text).splitlines(True)]

    # Only the lines around the first divergence are diffed (``impl.bounds``): the
    # texts may be megabytes, and what follows the first divergence is noise.
    (start, a), (_, b) = _window(expected, i), _window(got, i)
    shown = "" if (a, b) == (expected, got) else f" (the lines around it, from offset {start})"
    diff = difflib.unified_diff(lines(a), lines(b), fromfile=names[0], tofile=names[1])
    return (
        f"first differing character at offset {i}: reference {expected[i : i + 20]!r} vs engine {got[i : i + 20]!r}"
        f"{shown}\n" + "".join(diff)
    )


def _window(text: str, i: int) -> tuple[int, str]:
    """The lines of ``text`` around offset ``i``: ``diff_context_lines`` on each side,
    and at most ``diff_line_chars`` characters a line's worth on each side."""
    context, reach = BOUNDS.diff_context_lines, BOUNDS.diff_line_chars * (BOUNDS.diff_context_lines + 1)
    start = i
    for _ in range(context + 1):
        start = text.rfind("\n", max(0, i - reach), start)
        if start < 0:
            break
    start = max(0, i - reach) if start < 0 else start + 1
    end = i
    for _ in range(context + 1):
        end = text.find("\n", end + 1, i + reach)
        if end < 0:
            break
    end = min(len(text), i + reach) if end < 0 else end + 1
    return start, text[start:end]


def bounded_answer(reference: str, got: str, field: str) -> None:
    """An answer text far longer than the reference's is an oversize answer, not a
    divergence to diff: ``error`` in one line naming the field and both sizes. The
    bound (``render_factor`` × the reference + ``render_slack_chars``) leaves room
    for any plausible wrong rendering (a doubled prompt, an extra system block)."""
    most = BOUNDS.render_factor * len(reference) + BOUNDS.render_slack_chars
    if len(got) > most:
        raise EngineError(
            f"answer field {field} is {len(got):,} characters; the reference's is {len(reference):,} "
            f"(bound {BOUNDS.render_factor} × reference + {BOUNDS.render_slack_chars:,} = {most:,})"
        )


def fail_if(problem: str | None, where: str) -> None:
    """Fail the case with ``where: problem`` when a check found a problem: the gate's
    own message, without a traceback or an echo of the assertion."""
    if problem is not None:
        pytest.fail(f"{where}: {problem}", pytrace=False)
