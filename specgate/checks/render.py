"""The render stage's comparison: the engine's prompt against transformers', byte
for byte, and refusals where transformers refuses.

Only a structured refusal (``Unsupported``) counts as refusing: an engine that
crashes or hangs on a template the reference refuses has not refused it — that is
an ``error`` like any other crash, never a pass.
"""

from __future__ import annotations

from typing import Any

from specgate.gate import text_diff


def check(expected: dict[str, Any], got: str | None, refusal: str, key: str) -> str | None:
    """``expected`` is the snapshot case (``{key: text}`` or ``{"error": {...}}``);
    ``got`` the engine's text, or None when it refused with message ``refusal``."""
    if "error" in expected:
        error = expected["error"]
        if got is not None:
            return (
                f"the reference refuses this input ({error['type']}: {error['message']}) "
                f"but the engine rendered {got[:300]!r}"
            )
        if error["raised_by_template"] and error["message"] not in refusal:
            return (
                f"the template's own raise_exception message {error['message']!r} does not surface "
                f"in the engine's refusal: {refusal!r}"
            )
        return None
    if got is None:
        return f"the engine refused what the reference renders: {refusal}"
    diff = text_diff(expected[key], got)
    return None if diff is None else f"rendered prompt differs from transformers\n{diff}"
