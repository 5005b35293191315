"""What an adapter keeps loaded per model, and how much of it: the one cache style of
the oracle and the reference adapters.

A session walks dozens of models one after another (27 tiny models and the real
ones), so whatever an adapter loads per model (a parsed vocabulary, a tokenizer, a
llama.cpp context, transformers' weights) is kept for the few most recently used
models only. Unbounded, llama.cpp's vocab-only contexts alone (~50 MB each for a
150k vocabulary) held 1.5 GB by the end of the reference tests.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any


class PerModel:
    """Values loaded per key (a GGUF path, or a path and a mode), least recently used
    first, at most ``limit`` of them. ``close(value)`` runs for each value evicted,
    dropped or cleared (e.g. a llama.cpp context's ``close``)."""

    def __init__(self, limit: int, close: Callable[[Any], None] | None = None) -> None:
        if limit < 1:
            raise ValueError(f"limit must be at least 1, not {limit}")
        self.limit = limit
        self._close = close
        self._loaded: dict[Hashable, Any] = {}

    def get(self, key: Hashable, load: Callable[[], Any]) -> Any:
        """The value loaded for ``key``, loading it (and evicting the oldest) if absent.
        A load that raises caches nothing (e.g. a refused chat template is refused again)."""
        if key in self._loaded:
            self._loaded[key] = self._loaded.pop(key)  # now the most recently used
            return self._loaded[key]
        value = load()
        while len(self._loaded) >= self.limit:
            self.drop(next(iter(self._loaded)))
        self._loaded[key] = value
        return value

    def loaded_values(self) -> list[Any]:
        """The values loaded now, least recently used first."""
        return list(self._loaded.values())

    def loaded_keys(self) -> list[Hashable]:
        """The keys loaded now, least recently used first."""
        return list(self._loaded)

    def drop(self, key: Hashable) -> None:
        """Forget ``key``'s value (closing it); absent keys are ignored."""
        if key in self._loaded:
            value = self._loaded.pop(key)
            if self._close is not None:
                self._close(value)

    def clear(self) -> None:
        for key in list(self._loaded):
            self.drop(key)

    def __len__(self) -> int:
        return len(self._loaded)
