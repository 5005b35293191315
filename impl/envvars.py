"""Numeric settings the adapters read from the environment, checked when read: a
value that is not a positive number is one clear ``EngineError`` naming the
variable, never a traceback or a silent default."""

from __future__ import annotations

import os
from pathlib import Path

from impl.protocol import EngineError


def cache_dir() -> Path:
    """specgate's cache folder: ``$SPECGATE_CACHE``, else ``$XDG_CACHE_HOME/specgate`` or
    ``~/.cache/specgate`` (models, tiny models, wheels, the oracle's dequantized weights)."""
    if env := os.environ.get("SPECGATE_CACHE"):
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "specgate"


def weights_store_dir() -> Path | None:
    """Where the oracle engine keeps dequantized weights between processes
    (``oracle.weights_store``): ``$SPECGATE_WEIGHTS_STORE``, else the cache's
    ``dequantized/`` folder; ``off`` keeps none (every load dequantizes)."""
    raw = os.environ.get("SPECGATE_WEIGHTS_STORE")
    if raw is None or not raw.strip():
        return cache_dir() / "dequantized"
    return None if raw.strip().lower() == "off" else Path(raw).expanduser()


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


def env_whole(name: str, default: int, what: str) -> int:
    """A whole number ≥ 0 (0 has a meaning: e.g. the full logits array)."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    if not raw.strip().isdigit():
        raise EngineError(f"{name}={raw!r} must be a non-negative whole number of {what}")
    return int(raw)


#: Every numeric ``SPECGATE_*`` setting, how it is read and its default: ``check_all``
#: reads them all when a run or a command starts, so a bad one is one line before
#: anything runs (and never a traceback where it is first read, e.g. at import).
NUMERIC = {
    "SPECGATE_CMD_TIMEOUT": lambda n: env_seconds(n, 60.0),
    "SPECGATE_CMD_STARTUP_TIMEOUT": lambda n: env_seconds(n, 120.0),
    "SPECGATE_CMD_MAX_LINE_BYTES": lambda n: env_count(n, 1),
    "SPECGATE_CMD_LOGITS_TOP_K": lambda n: env_whole(n, 1024, "candidates"),
    "SPECGATE_HTTP_TIMEOUT": lambda n: env_seconds(n, 60.0),
    "SPECGATE_HTTP_MAX_BODY_BYTES": lambda n: env_count(n, 1),
    "SPECGATE_HTTP_TOP_K": lambda n: env_count(n, 64, "candidates"),
    "SPECGATE_LLAMA_THREADS": lambda n: llama_threads(),
}


def llama_threads() -> int:
    """``SPECGATE_LLAMA_THREADS``: the threads llama.cpp references run on (default 2)."""
    return env_count("SPECGATE_LLAMA_THREADS", 2, "threads")


def check_all() -> None:
    """Read every numeric setting: the first bad one is an ``EngineError`` naming it."""
    for name, read in NUMERIC.items():
        read(name)
