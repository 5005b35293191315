"""Mutant engine: stop strings matched inside each token's piece instead of on the
byte stream.

A stop string that straddles two tokens (``"\\n\\n"`` arriving as ``"\\n"`` +
``"\\n"``) is never seen, so generation runs past it. Expected to fail the
generate gate.

    python tests/engines/mutants/stop_per_token.py
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

from impl.process.server import serve
from impl.registry import resolve
from oracle import decode_loop

_last_piece = [b""]


def find_stop_in_last_piece(stream: bytes, stops: Sequence[bytes]) -> int | None:
    start = len(stream) - len(_last_piece[0])
    hits = [start + i for s in stops if s and (i := _last_piece[0].find(s)) != -1]
    return min(hits) if hits else None


def plant() -> None:
    generate = decode_loop.generate

    def generate_per_token(source: Any, piece: Callable[[int], bytes], *args: Any, **kwargs: Any) -> Any:
        def remembered(token: int) -> bytes:
            _last_piece[0] = piece(token)
            return _last_piece[0]

        return generate(source, remembered, *args, **kwargs)

    decode_loop.find_stop = find_stop_in_last_piece
    decode_loop.generate = generate_per_token


if __name__ == "__main__":
    plant()
    sys.exit(serve(resolve("oracle")))
