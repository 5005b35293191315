"""A slow, wrong engine for the interrupt tests: the oracle over PROTOCOL.md, answering
each ``split`` after ``SLOW_ENGINE_DELAY`` seconds (default 0.5) with its last piece
dropped (every split case fails, so a run has root-cause groups to shrink); with
``SLOW_ENGINE_LINGER`` seconds set it stays alive that long after its stdin closes
(the client then waits for it, and kills it, before the run can write its report).

    python tests/engines/slow_engine.py   (serves PROTOCOL.md on stdio)
"""

from __future__ import annotations

import os
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


if __name__ == "__main__":
    status = serve(SlowWrongSplit())
    time.sleep(float(os.environ.get("SLOW_ENGINE_LINGER", "0")))
    sys.exit(status)
