"""The logits request names the positions the gate judges (PROTOCOL.md 4.3). An adapter
that takes them answers those rows; one written before they existed (``logits(model,
ids)``) is called without them — in process and served — and judged on the same rows of
its answer of every row, with the same verdicts; a wrong row in either form still fails."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from impl.ops import OPS, accepted
from impl.oracle import OracleEngine
from tests.engines.every_row_adapter import EveryRowOracle
from tests.engines.parity_run import run_parity

MODEL = "tiny-qwen2-f32"
ADAPTER = "tests.engines.every_row_adapter"


def test_the_oracle_answers_the_rows_asked_as_its_rows_of_every_position(tiny_model) -> None:
    ids, positions = [9707, 11, 1879, 0, 151645, 198, 40], [0, 3, 6]
    engine = OracleEngine()
    every = np.asarray(engine.logits(tiny_model, ids))
    asked = OPS["logits"].invoke(engine, {"model": tiny_model, "ids": ids, "positions": positions})
    assert asked.shape == (3, every.shape[1])
    # the same pass, only the output projection limited to those rows: equal to float32 rounding
    np.testing.assert_allclose(asked, every[positions], rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match="increasing indices"):
        engine.logits(tiny_model, ids, [3, 0])
    with pytest.raises(ValueError, match="increasing indices"):
        engine.logits(tiny_model, ids, [7])


def test_an_adapter_without_positions_is_called_without_them(tiny_model) -> None:
    ids = [9707, 11, 1879]
    engine = EveryRowOracle()
    answer = OPS["logits"].invoke(engine, {"model": tiny_model, "ids": ids, "positions": [2]})
    assert np.asarray(answer).shape[0] == 3  # every row, as it always answered
    assert accepted("logits", engine.logits, {"positions": [2]}) == {}
    assert accepted("logits", OracleEngine().logits, {"positions": [2]}) == {"positions": [2]}
    # an argument no engine may ignore is never dropped: the call fails as it should
    assert accepted("trace", engine.logits, {"positions": [2]}) == {"positions": [2]}


@pytest.mark.parametrize(
    ("adapter", "status"),
    [  # every row of the 512-token prompt computed and sent (~300 MB): the slow tier's
        pytest.param("EveryRowOracle", 0, marks=pytest.mark.slow),
        ("ShiftedRowsOracle", 1),
    ],
)
def test_an_every_row_adapter_is_gated_on_the_asked_rows(tmp_path: Path, tiny_model, adapter, status) -> None:
    # the planted shift is gated without the 512-token prompt: five cases show it as well
    select = ["-k", "not long_code_512"] if status else []
    run = run_parity(tmp_path, f"{ADAPTER}:{adapter}", "logits", MODEL, "--diagnose-budget", "0",
                     "--shrink-budget", "0", *select, timeout=600)  # fmt: skip
    assert run.status == status, run.output[-3000:]
    outcomes = run.outcomes()
    if status == 0:
        assert outcomes == {"pass": 12}, outcomes
    else:  # one position late: every case longer than one token fails in both classes
        assert outcomes == {"fail": 8, "pass": 2}, outcomes  # single_token's one row is right
