"""A slow, wrong engine for the interrupt tests: the oracle over PROTOCOL.md, answering
each ``split`` after ``SLOW_ENGINE_DELAY`` seconds (default 0.5) with its last piece
dropped (every split case fails, so a run has root-cause groups to shrink); with
``SLOW_ENGINE_LINGER`` seconds set it stays alive that long after its stdin closes
(the client then waits for it, and kills it, before the run can write its report).
With ``SLOW_ENGINE_STARTS`` naming a file, each start appends a line to it, and the
start numbered ``SLOW_ENGINE_SIGINT_AT_CLOSE`` sends SIGINT to its parent (the run)
once its stdin says shutdown — a Ctrl-C landing, without any timing, while the run
closes that engine.

    python tests/engines/slow_engine.py   (serves PROTOCOL.md on stdio)
"""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import Any

from impl.oracle import OracleEngine
from impl.process.server import serve


class SlowWrongSplit(OracleEngine):
    name = "slow-wrong-split"

    def split(self, model: Any, text: str) -> list[str]:
        time.sleep(float(os.environ.get("SLOW_ENGINE_DELAY", "0.5")))
        return super().split(model, text)[:-1]


def life() -> int:
    """This start's number (1 for the first), when ``SLOW_ENGINE_STARTS`` counts them."""
    path = os.environ.get("SLOW_ENGINE_STARTS")
    if not path:
        return 0
    with open(path, "a+", encoding="utf-8") as starts:
        starts.write(f"{os.getpid()}\n")
        starts.seek(0)
        return len(starts.read().splitlines())


if __name__ == "__main__":
    number = life()
    status = serve(SlowWrongSplit())
    if number and str(number) == os.environ.get("SLOW_ENGINE_SIGINT_AT_CLOSE"):
        os.kill(os.getppid(), signal.SIGINT)
    time.sleep(float(os.environ.get("SLOW_ENGINE_LINGER", "0")))
    sys.exit(status)
