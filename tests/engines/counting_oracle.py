"""The oracle engine, noting in a file (``COUNTING_ORACLE_LOG``) each time it loads a
model's forward weights: what ``tests/run/test_model_order.py`` counts."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import impl.oracle
from impl.oracle import OracleEngine


class CountingOracle(OracleEngine):
    name = "counting-oracle"

    def __init__(self) -> None:
        super().__init__()
        log, load = Path(os.environ["COUNTING_ORACLE_LOG"]), impl.oracle.load_forward_model

        def counted(path: Path) -> Any:
            with log.open("a", encoding="utf-8") as f:
                f.write(f"{Path(path).stem}\n")
            return load(path)

        impl.oracle.load_forward_model = counted
