"""The render stage's comparison: the engine's prompt against transformers', byte
for byte, and refusals where transformers refuses.

Only a structured refusal (``Unsupported``) counts as refusing: an engine that
crashes or hangs on a template the reference refuses has not refused it — that is
an ``error`` like any other crash, never a pass.
"""

from __future__ import annotations

from typing import Any

from impl.protocol import Engine, Unsupported
from specgate.outcomes.gate import bounded_answer, call, not_applicable, refused, text_diff


def answer(engine: Engine, expected: dict[str, Any], *args: Any, method: str = "render", **kwargs: Any):
    """``(text, "")`` when the engine renders, ``(None, message)`` when it refuses with
    ``Unsupported``. A refusal where the reference renders is the ``refused`` outcome;
    a crash is an ``error`` whatever the reference does (``call`` raises it)."""
    if method == "render_template" and engine.offers("render") and "render_template" not in engine.ops:
        not_applicable(
            f"{engine.name} renders only its models' own templates (no render_template entry point)"
        )
    try:
        return call(engine, "render", *args, method=method, refusal_expected=True, **kwargs), ""
    except Unsupported as exc:
        if "error" not in expected:
            refused(f"{getattr(engine, 'label', engine.name)} refuses this render input: {exc}")
        return None, str(exc)


def check(
    expected: dict[str, Any], got: str | None, refusal: str, key: str, reference: str = "transformers"
) -> str | None:
    """``expected`` is the snapshot case (``{key: text}`` or ``{"error": {...}}``);
    ``got`` the engine's text, or None when it refused with message ``refusal``."""
    if "error" in expected:
        error = expected["error"]
        if got is not None:
            return (
                f"the reference refuses this input ({error['type']}: {error['message']}) "
                f"but the engine rendered {got[:300]!r}{' …' if len(got) > 300 else ''}"
            )
        if error["raised_by_template"] and error["message"] not in refusal:
            return (
                f"the template's own raise_exception message {error['message']!r} does not surface "
                f"in the engine's refusal: {refusal!r}"
            )
        return None
    if got is None:
        return f"the engine refused what the reference renders: {refusal}"
    bounded_answer(expected[key], got, key)
    diff = text_diff(expected[key], got)
    return None if diff is None else f"rendered prompt differs from {reference}\n{diff}"
