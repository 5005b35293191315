"""Gate outcomes and first-divergence messages.

A gate test calls the engine through ``call`` and compares with a reference. Its
outcome is one of:

  pass · fail (with the first divergence) · n/a (capability not offered — never a
  pass) · reference-disagreement (the references themselves disagree; recorded with
  the reason, never an engine failure) · error (the engine crashed, hung or answered
  garbage; the run goes on).

``n/a`` and ``reference-disagreement`` are pytest skips with a tagged reason;
``error`` is a failure whose exception is ``EngineError``. ``specgate.plugin``
classifies them for the matrix and the report.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from impl.protocol import Engine, EngineError, Unsupported

OUTCOMES = ("pass", "fail", "n/a", "reference-disagreement", "error")
NA_TAG = "n/a:"
DISAGREE_TAG = "reference-disagreement:"


def not_applicable(reason: str) -> None:
    pytest.skip(f"{NA_TAG} {reason}")


def reference_disagreement(reason: str) -> None:
    pytest.skip(f"{DISAGREE_TAG} {reason}")


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

    A capability the engine does not declare, or an input it refuses with
    ``Unsupported`` (e.g. a vocabulary it cannot load), is ``n/a`` — unless the gate
    checks refusals itself (``refusal_expected``: a template the reference refuses
    must be refused), then ``Unsupported`` propagates. Any exception other than
    an assertion becomes ``EngineError`` (outcome ``error``) naming the stage, so a
    crashing engine never aborts the run.
    """
    if not engine.offers(capability):
        not_applicable(f"{engine.name} does not offer {capability!r}")
    try:
        return getattr(engine, method or capability)(*args, **kwargs)
    except Unsupported as exc:
        if refusal_expected:
            raise
        not_applicable(f"{engine.name} does not support this {capability} input: {exc}")
    except EngineError:
        raise
    except Exception as exc:  # the engine's own bug, surfaced as an error outcome
        raise EngineError(f"{engine.name}.{capability} raised {type(exc).__name__}: {exc}") from exc


def first_divergence(
    expected: Sequence[Any],
    got: Sequence[Any],
    show: Callable[[Any], str] = repr,
    context: int = 3,
) -> str | None:
    """None when equal; else where the two sequences first differ, with neighbours
    rendered by ``show`` on both sides (e.g. token id -> its piece)."""
    if list(expected) == list(got):
        return None
    i = next(
        (k for k, (a, b) in enumerate(zip(expected, got, strict=False)) if a != b),
        min(len(expected), len(got)),
    )
    lo = max(0, i - context)

    def window(seq: Sequence[Any]) -> str:
        cells = []
        for k in range(lo, min(len(seq), i + context + 1)):
            cell = f"{seq[k]!r}={show(seq[k])}" if show is not repr else repr(seq[k])
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
    """None when equal; else a unified diff with whitespace made visible and the
    first differing character offset."""
    if expected == got:
        return None
    i = next(
        (k for k, (a, b) in enumerate(zip(expected, got, strict=False)) if a != b),
        min(len(expected), len(got)),
    )
    diff = difflib.unified_diff(
        visible(expected).splitlines(keepends=True),
        visible(got).splitlines(keepends=True),
        fromfile=names[0],
        tofile=names[1],
    )
    return (
        f"first differing character at offset {i}: reference {expected[i : i + 20]!r} vs engine {got[i : i + 20]!r}\n"
        + "".join(diff)
    )
