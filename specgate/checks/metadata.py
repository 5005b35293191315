"""The metadata stage's comparison: one dispatch field of the engine's answer
(``hparams.n_head``, ``special.eos``, …) against the value the references agree on.
An engine that declares the stage must answer every field the gate compares: a
missing field fails, named."""

from __future__ import annotations

from typing import Any


def field_of(answer: Any, field: str) -> tuple[bool, Any]:
    """``(found, value)`` of a dotted ``field`` in the engine's metadata answer."""
    value = answer
    for part in field.split("."):
        if not isinstance(value, dict) or part not in value:
            return False, None
        value = value[part]
    return True, value


def check_field(answer: Any, field: str, case: dict[str, Any]) -> str | None:
    found, got = field_of(answer, field)
    if not found:
        return (
            f"the engine declares the metadata stage but its answer has no {field!r} "
            f"(references say {case['value']!r})"
        )
    if got != case["value"]:
        sources = ", ".join(f"{k}={v!r}" for k, v in case["sources"].items())
        return f"engine says {got!r}, references say {case['value']!r} ({sources})"
    return None
