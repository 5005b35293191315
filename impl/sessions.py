"""The session ops (PROTOCOL.md 4.7) of an in-process reference adapter, shared by
transformers' and llama.cpp's: each session an ``oracle.session.Session`` over the
library's own KV cache (``impl.hf.forward.Cached``: a ``DynamicCache``;
``impl.llamacpp.forward.Cached``: a llama.cpp context) — append feeds the ids on top of
the cache, truncate drops the KV past ``n``, generate runs the protocol's decode loop
(``oracle.decode_loop``) from the session's last logits with the library's own stop
ids, the emitted ids joining the cache. The bookkeeping (ids, the last logits, the
pending last token) is the oracle's; the logits are the library's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np

from impl.protocol import ModelRef


class Held:
    """An open session: the model it is over and its ``oracle.session.Session``."""

    def __init__(self, model: ModelRef, session: Any) -> None:
        self.model = model
        self.session = session


class SessionOps:
    """The five session ops over ``_session_cache(model)`` (a new empty KV cache with
    ``prefill``, ``truncate``, ``reset``) and ``_decoding(model)`` (a token's bytes, the
    stop ids); at most ``max_sessions`` open at once, one more is an error naming the bound."""

    max_sessions: ClassVar[int] = 16
    name: ClassVar[str]

    def _session_cache(self, model: ModelRef) -> Any:
        raise NotImplementedError

    def _decoding(self, model: ModelRef) -> tuple[Callable[[int], bytes], list[int]]:
        raise NotImplementedError

    def _session_closed(self, held: Held) -> None:
        """After ``held`` is closed (its cache may go back to a pool)."""

    def __init__(self) -> None:
        super().__init__()
        self._held: dict[str, Held] = {}
        self._opened = 0

    def session_open(self, model: ModelRef) -> str:
        from oracle.session import Session

        if len(self._held) >= self.max_sessions:
            raise ValueError(f"{len(self._held)} sessions are open, the most {self.name} keeps: close one")
        held = Held(model, Session(self._session_cache(model)))
        self._opened += 1
        self._held[f"s{self._opened}"] = held
        return f"s{self._opened}"

    def _session(self, session: str) -> Held:
        try:
            return self._held[session]
        except KeyError:
            raise ValueError(f"no open session {session!r}") from None

    def session_append(self, session: str, ids: Sequence[int]) -> dict[str, Any]:
        n_past, logits = self._session(session).session.append(ids)
        return {"n_past": n_past, "logits": np.asarray(logits, dtype=np.float32)}

    def session_generate(self, session: str, params: dict[str, Any]) -> dict[str, Any]:
        held = self._session(session)
        piece, stops = self._decoding(held.model)
        generated = held.session.generate(piece, params, stops)
        return {"n_past": len(held.session), "generated": generated}

    def session_truncate(self, session: str, n: int) -> int:
        return self._session(session).session.truncate(n)

    def session_close(self, session: str) -> None:
        held = self._session(session)
        del self._held[session]
        self._session_closed(held)

    def close_sessions(self) -> None:
        for session in list(self._held):
            self.session_close(session)


def played(cache: Any, steps: Sequence[tuple[int, Sequence[int]]]) -> list[np.ndarray]:
    """A library's KV cache (``Cached``) played through ``steps`` (``(keep, ids)``: cut back
    to ``keep`` tokens when it holds more, then ``ids`` fed on top): the last position's
    float32 logits after each (the state references' ``played_logits``)."""
    rows = []
    for keep, ids in steps:
        cache.truncate(keep)
        if len(cache) != keep:
            raise ValueError(f"the cache holds {len(cache)} tokens, the step keeps {keep}")
        rows.append(cache.prefill(ids)[-1])
    return rows
