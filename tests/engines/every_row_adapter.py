"""Python adapters written before the logits request named its ``positions``: their
``logits(model, ids)`` answers every row. ``EveryRowOracle`` answers the oracle's rows;
``ShiftedRowsOracle`` answers them one position late (row t holds position t - 1's
logits) — a bug the gate must still see when it reads the asked rows out of every row.

    --impl tests.engines.every_row_adapter:EveryRowOracle
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from impl.oracle import OracleEngine
from impl.protocol import ModelRef


class EveryRowOracle(OracleEngine):
    name = "every-row"

    def logits(self, model: ModelRef, ids: Sequence[int]) -> Any:  # type: ignore[override]  # the old signature
        return super().logits(model, ids)


class ShiftedRowsOracle(OracleEngine):
    name = "shifted-rows"

    def logits(self, model: ModelRef, ids: Sequence[int]) -> Any:  # type: ignore[override]
        rows = np.asarray(super().logits(model, ids))
        return np.concatenate([rows[:1], rows[:-1]])
