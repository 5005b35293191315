"""Numeric settings the adapters read from the environment, checked when read: a
value that is not a positive number is one clear ``EngineError`` naming the
variable, never a traceback or a silent default."""

from __future__ import annotations

import os

from impl.protocol import EngineError


def env_seconds(name: str, default: float) -> float:
    """A positive number of seconds."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise EngineError(f"{name}={raw!r} is not a number of seconds") from None
    if not value > 0 or value == float("inf"):
        raise EngineError(f"{name}={raw!r} must be a positive, finite number of seconds")
    return value


def env_count(name: str, default: int, what: str = "bytes") -> int:
    """A positive whole number (of bytes, by default)."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    if not raw.strip().isdigit() or int(raw) <= 0:
        raise EngineError(f"{name}={raw!r} must be a positive whole number of {what}")
    return int(raw)
