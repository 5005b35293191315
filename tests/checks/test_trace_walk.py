"""The trace stage's walk (``specgate.checks.trace``) on synthetic references: it finds
the first departing point of a 28-layer model in at most three requests, names where
the difference sits, skips kinds the engine does not offer, and passes in two."""

from __future__ import annotations

import numpy as np
import pytest

from oracle.trace import KINDS, all_points, split_point
from specgate.checks import trace as checks

N_LAYER, T, HEAD_DIM, N_HEAD = 28, 6, 4, 3


def reference() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {p: rng.normal(size=(T, N_HEAD * HEAD_DIM)) for p in all_points(N_LAYER)}


class Engine:
    """Answers the reference, with ``bugs`` (point -> function of the reference value) applied."""

    def __init__(self, ref: dict[str, np.ndarray], bugs: dict[str, object]) -> None:
        self.ref, self.bugs, self.requests = ref, bugs, []

    def __call__(self, points: list[str], positions: list[int] | None) -> dict[str, np.ndarray]:
        self.requests.append(points)
        out = {}
        for p in points:
            value = self.ref[p].astype(np.float32)
            out[p] = self.bugs[p](value.copy()) if p in self.bugs else value
        return out


def walk(engine: Engine, ref: dict[str, np.ndarray], cls: str = "exact", offered=frozenset(KINDS)):
    return checks.walk(engine, ref, N_LAYER, HEAD_DIM, cls, offered, list(range(T)), None)


def wrong_head_1_from_position_2(v: np.ndarray) -> np.ndarray:
    v[2:, HEAD_DIM : 2 * HEAD_DIM] += 1.0
    return v


def downstream(layer: int, first_kind: str) -> set[str]:
    """The points a bug at ``first_kind-layer`` also changes (every later one)."""
    points = all_points(N_LAYER)
    return set(points[points.index(f"{first_kind}-{layer}") :])


@pytest.mark.parametrize(("layer", "kind"), [(0, "Kcur"), (9, "kqv_out"), (16, "ffn_out"), (27, "attn_norm")])
def test_the_first_departing_point_is_found_in_three_requests(layer: int, kind: str) -> None:
    ref = reference()
    engine = Engine(ref, {p: wrong_head_1_from_position_2 for p in downstream(layer, kind)})
    verdict = walk(engine, ref)
    assert verdict.diverged is not None and verdict.diverged.point == f"{kind}-{layer}"
    assert verdict.layer == layer and verdict.requests == len(engine.requests) <= 3
    assert verdict.diverged.positions == [2, 3, 4, 5]
    message = verdict.message()
    assert message.startswith(f"first divergence at {kind}-{layer} (layer {layer}), positions 2–5")
    if kind in ("Kcur", "kqv_out"):
        assert "heads 1, dims 0–3; relative error" in message  # one head, all of its dims
    else:
        assert "dims 4–7; relative error" in message
    assert "vs tol 0.0001" in message
    matched = message.split("matching before it: ")[1].split("\n")[0].split(", ")
    assert matched[0] == "inp_embd" and all(
        split_point(p)[1] is None or split_point(p)[1] <= layer for p in matched
    )
    assert f"attn_norm-{layer}" in matched or kind == "attn_norm"
    assert sum(len(r) for r in engine.requests) < len(ref) // 10  # not a dump of the graph


def test_a_matching_engine_passes_in_two_requests() -> None:
    ref = reference()
    engine = Engine(ref, {})
    verdict = walk(engine, ref)
    assert verdict.diverged is None and verdict.requests == 2
    assert engine.requests[-1] == ["result_output"]


def test_noise_under_the_class_tolerance_passes_and_over_it_fails() -> None:
    ref = reference()

    def scaled(point: str) -> object:
        return lambda v: v * np.float32(1 + checks.tolerance("quantized", point) / 2)

    small = {p: scaled(p) for p in all_points(N_LAYER)}
    assert walk(Engine(ref, small), ref, "quantized").diverged is None
    assert walk(Engine(ref, small), ref, "exact").diverged is not None


def test_kinds_the_engine_does_not_offer_are_skipped_and_said() -> None:
    ref = reference()
    engine = Engine(ref, {p: wrong_head_1_from_position_2 for p in downstream(5, "Vcur")})
    offered = frozenset(KINDS) - {"Qcur", "Kcur"}
    verdict = walk(engine, ref, offered=offered)
    assert verdict.diverged.point == "Vcur-5"
    assert not any(split_point(p)[0] in ("Qcur", "Kcur") for r in engine.requests for p in r)
    assert "not offered by the engine (skipped): Kcur, Qcur" in verdict.message()


def test_a_wrong_shape_or_non_finite_answer_is_the_verdict() -> None:
    ref = reference()
    verdict = walk(Engine(ref, {"inp_embd": lambda v: v[:, :5]}), ref)
    assert verdict.diverged.point == "inp_embd" and "shape [6, 5], reference [6, 12]" in verdict.message()
    nan = {p: (lambda v: np.where(np.arange(T)[:, None] == 3, np.nan, v)) for p in downstream(2, "ffn_norm")}
    verdict = walk(Engine(ref, nan), ref)
    assert verdict.diverged.point == "ffn_norm-2" and "non-finite values at positions 3" in verdict.message()
    # malformed, not a divergence: the gate's outcome is error, in one line still locating it
    assert verdict.malformed() == (
        "trace answer field points.ffn_norm-2 (layer 2): non-finite values at positions 3; "
        f"first such point, after {', '.join(verdict.matched)} matched"
    )
    assert walk(Engine(ref, {}), ref).malformed() is None


def test_ranges() -> None:
    assert checks.ranges([0, 1, 2, 5, 7, 8]) == "0–2, 5, 7–8"
    assert checks.ranges([]) == ""


def test_result_output_is_asked_at_a_bounded_number_of_positions() -> None:
    ref = reference()
    ref["result_output"] = np.random.default_rng(1).normal(size=(40, 7))
    asked: list[list[int] | None] = []

    def fetch(points: list[str], positions: list[int] | None) -> dict[str, np.ndarray]:
        asked.append(positions)
        rows = range(T) if positions is None else positions
        return {
            p: (ref[p] if p != "result_output" else ref[p][list(rows)]).astype(np.float32) for p in points
        }

    verdict = checks.walk(fetch, ref, N_LAYER, HEAD_DIM, "exact", frozenset(KINDS), list(range(40)), None)
    assert verdict.diverged is None
    assert asked[-1] == checks.spread(40, checks.OUTPUT_ROWS) and len(asked[-1]) == 16
    assert asked[-1][0] == 0 and asked[-1][-1] == 39
