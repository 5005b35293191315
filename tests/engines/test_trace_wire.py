"""The trace op over PROTOCOL.md (section 4.6): the handshake declares the capability and
its point kinds, the values survive the wire as float32 ``$array``s, ``positions``
picks rows, and what does not follow the protocol is refused or is the engine's error."""

from __future__ import annotations

import io
import json
import shlex
import sys
from pathlib import Path

import numpy as np
import pytest

from impl.process import schema, wire
from impl.process.client import CmdEngine
from impl.process.server import handle, serve
from impl.protocol import TRACE_KINDS, EngineError, ModelRef
from tests.engines.fault_engine import ToyEngine

FAULT_ENGINE = Path(__file__).with_name("fault_engine.py")
MODEL = ModelRef("toy-model", Path("/nonexistent/toy.gguf"), "ab" * 32)


@pytest.fixture
def toy():
    engine = CmdEngine(shlex.join([sys.executable, str(FAULT_ENGINE), "toy"]), timeout=20)
    yield engine
    engine.close()


def test_the_handshake_declares_trace_and_its_points() -> None:
    out = io.StringIO()
    serve(ToyEngine(), stdin=iter([]), stdout=out)
    hello = json.loads(out.getvalue().splitlines()[0])
    assert "trace" in hello["capabilities"] and "trace" in hello["ops"]
    assert hello["trace_points"] == list(TRACE_KINDS)
    assert schema.problem("handshake.schema.json", hello) is None
    bad = {**hello, "trace_points": ["Qcur", "q_proj"]}
    assert "handshake.schema.json#/properties/trace_points/items/enum" in schema.problem(
        "handshake.schema.json", bad
    )


def test_trace_round_trips_float32_rows_and_positions(toy) -> None:
    assert toy.offers("trace") and toy.trace_points == frozenset(TRACE_KINDS)
    got = toy.trace(MODEL, [7, 8, 9], ["inp_embd", "Kcur-2"])
    assert list(got) == ["inp_embd", "Kcur-2"]
    assert got["Kcur-2"].dtype == np.float32
    assert got["Kcur-2"].tolist() == [[7, 0, 1], [8, 1, 1], [9, 2, 1]]
    picked = toy.trace(MODEL, [7, 8, 9], ["result_norm"], positions=[2, 0])
    assert picked["result_norm"].tolist() == [[9, 2, 0], [7, 0, 0]]


def test_a_point_with_the_wrong_row_count_is_an_engine_error(toy) -> None:
    with pytest.raises(
        EngineError,
        match=r"trace: answer field points.l_out-9 has shape \[2, 3\]; expected \[3, columns\] \(one row per",
    ):
        toy.trace(MODEL, [7, 8, 9], ["inp_embd", "l_out-9"])


def test_a_request_naming_no_point_is_refused_by_the_server() -> None:
    request = {"id": 4, "op": "trace", "model": wire.model_to_wire(MODEL), "ids": [1], "points": ["q_proj-0"]}
    response = handle(ToyEngine(), request)
    assert response["error"]["type"] == "bad_request"
    assert "requests/trace.schema.json#/properties/points/items/pattern" in response["error"]["message"]


def test_a_result_that_is_not_float32_arrays_breaks_the_schema() -> None:
    good = {"points": {"inp_embd": wire.encode_value(np.zeros((2, 3), np.float32))}}
    assert schema.result_problem("trace", good) is None
    for bad in ({"inp_embd": [[0.0]]}, {"points": {"inp_embd": wire.encode_value(np.zeros(3, np.float32))}},
                {"points": {"inp_embd": wire.encode_value(np.zeros((2, 3), np.float64))}}):  # fmt: skip
        assert schema.result_problem("trace", bad) is not None, bad
